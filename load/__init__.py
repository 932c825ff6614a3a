"""The load test (`make load`, issue 29 item 4): N outside agent loops at once, each an asyncio
client with an API token of its own, stepping external runs against the production shape that
the soak starts (gunicorn, two Celery workers and beat, on PostgreSQL and Redis) for a fixed
time, while a scripted reviewer answers the held steps through the API and another fetches the
reviewers' queue page. It reports each call's p50/p99, steps/s, the server's CPU per step and
the queue page's p95, and fails on any error. See load/__main__.py."""
