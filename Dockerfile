# TMS server image. The database is the embedded PostgreSQL, kept in the /data volume, unless
# TMS_DATABASE_URL points at another server.
#
#   docker build -t tms .
#   docker run -d --name tms -p 8000:8000 -v tms-data:/data -e TMS_BASE_URL=https://tms.example.org tms
#   docker exec tms uv run --no-dev tms approve npub1...
#
# Plugins (docs/extending.md): pip requirements installed into the image's environment, e.g.
#   docker build --build-arg TMS_PLUGINS_PIP="tms-notify==1.2 ./plugins/allowlist" -t tms .
# (paths are inside the build context), then enable them with -e TMS_PLUGINS=...
FROM python:3.11-slim

# tini is PID 1 (ENTRYPOINT below): it reaps the embedded PostgreSQL's postmaster, which is
# adopted by PID 1 once pg_ctl exits; `uv` as PID 1 never reaped it, and a postmaster that
# crashed stayed a zombie that PostgreSQL's lock file kept from starting again.
RUN apt-get update \
    && apt-get install -y --no-install-recommends tini \
    && rm -rf /var/lib/apt/lists/*
RUN pip install --no-cache-dir uv==0.13.9

ENV UV_COMPILE_BYTECODE=1 \
    UV_LINK_MODE=copy \
    UV_PYTHON_DOWNLOADS=never \
    UV_PROJECT_ENVIRONMENT=/app/.venv

WORKDIR /app

# Dependencies first, so this layer is rebuilt only when pyproject.toml or uv.lock change. The
# example plugins come too: uv reads every path source the lock names, the dev group's included,
# even when it installs none of them (--no-dev).
COPY pyproject.toml uv.lock README.md ./
COPY examples ./examples
RUN uv sync --locked --no-dev --no-install-project

# Then the project itself (installed editable: the sql/ migrations stay beside the package).
COPY tms ./tms
COPY sql ./sql
RUN uv sync --locked --no-dev

# The operator's plugins, if any, beside TMS (never removed by `uv run`, which syncs inexactly).
ARG TMS_PLUGINS_PIP=""
COPY . /tmp/context
RUN if [ -n "$TMS_PLUGINS_PIP" ]; then \
        cd /tmp/context && uv pip install --python /app/.venv/bin/python $TMS_PLUGINS_PIP; \
    fi \
    && rm -rf /tmp/context

RUN useradd --system --user-group --uid 10001 --home-dir /data --no-create-home tms \
    && mkdir -p /data \
    && chown tms:tms /data

# The environment was synced above, as root; at run time `uv run` only runs it.
# TMS_METRICS_HOST: the container's own network is the boundary (TMS_METRICS_PORT, if set, is
# reachable only where it is published, e.g. -p 127.0.0.1:9464:9464), not its loopback.
ENV TMS_HOST=0.0.0.0 \
    TMS_PORT=8000 \
    TMS_METRICS_HOST=0.0.0.0 \
    TMS_DATA_DIR=/data \
    UV_NO_SYNC=1 \
    UV_CACHE_DIR=/tmp/uv-cache \
    PYTHONUNBUFFERED=1

VOLUME ["/data"]
EXPOSE 8000
USER tms

HEALTHCHECK --interval=30s --timeout=5s --start-period=60s \
    CMD ["python", "-c", "import os, urllib.request as u; u.urlopen('http://127.0.0.1:%s/healthz' % os.environ.get('TMS_PORT', '8000'), timeout=4)"]

# `tms serve` runs one worker a core the container may use (at most 8; -e TMS_WORKERS=N chooses),
# supervised, on one port. tini passes SIGTERM on to `uv run`, which passes it on to `tms serve`,
# which stops its workers, then the embedded PostgreSQL, so `docker stop` leaves a consistent
# database behind.
ENTRYPOINT ["/usr/bin/tini", "--"]
CMD ["uv", "run", "--no-dev", "tms", "serve"]
