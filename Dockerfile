# Guardian's production image: gunicorn serves the app, whitenoise the collected static files.
# The same image runs the Celery worker and beat (see docker-compose.yml).
FROM python:3.12-slim

# PYTHONPATH: the code in /app wins over the installed copy, so BASE_DIR is /app (templates/).
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONPATH=/app

WORKDIR /app

# The project with its dependencies; manage.py, templates and static files are not part of it.
# Files are copied one by one (no `COPY . .`) so .venv, var/, .env and .git never enter the image.
COPY pyproject.toml ./
COPY guardian_core/ guardian_core/
COPY runs/ runs/
COPY escalations/ escalations/
COPY policies/ policies/
COPY demo/ demo/
# The MCP gateway (issue 27): an installed app, so every process of the image needs it.
COPY mcp_gateway/ mcp_gateway/
# The local guardian's corpus: only a retrained version (the learning loop) fits on it.
COPY training/ training/
RUN pip install . && rm -rf build *.egg-info

COPY manage.py ./
COPY templates/ templates/
COPY static/ static/
# Issue 28: the French catalogue, compiled here (polib writes the .mo; the image has no gettext).
COPY locale/ locale/

# A throwaway key only for this step: settings refuse to load without a strong one when DEBUG
# is off. The embedded defaults (SQLite, filesystem broker) create folders, so they go to /tmp.
RUN export SECRET_KEY="$(python -c 'import secrets; print(secrets.token_urlsafe(50))')" \
        DEBUG=false GUARDIAN_VAR_DIR=/tmp/build-var \
    && python manage.py collectstatic --no-input \
    && python manage.py compilemessages \
    && rm -rf /tmp/build-var

RUN useradd --system --uid 10001 --user-group --home-dir /app --no-create-home guardian \
    && install -d -o guardian -g guardian /app/var
USER guardian

EXPOSE 8000
# Threads, not only processes: an agent loop's long poll for a verdict (up to 30 s) holds a
# thread, so a few waiting loops cannot take every worker from the reviewers' pages.
CMD ["gunicorn", "--config", "python:guardian_core.gunicorn_conf", "guardian_core.wsgi:application", "--bind", "0.0.0.0:8000", "--workers", "3", \
     "--worker-class", "gthread", "--threads", "8"]
