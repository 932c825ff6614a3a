"""The soak with faults (`make soak`, issue 26 item 6): the production-shaped stack on this
machine under a few hundred runs of every kind while workers, Redis and PostgreSQL fail, then
the checks that nothing was lost, run twice or rewritten. See soak/__main__.py."""
