# TMS server image. The database is the embedded PostgreSQL, kept in the /data volume, unless
# TMS_DATABASE_URL points at another server.
#
#   docker build -t tms .
#   docker run -d --name tms -p 8000:8000 -v tms-data:/data -e TMS_BASE_URL=https://tms.example.org tms
#   docker exec tms uv run --no-dev tms approve npub1...
FROM python:3.11-slim

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

RUN useradd --system --user-group --uid 10001 --home-dir /data --no-create-home tms \
    && mkdir -p /data \
    && chown tms:tms /data

# The environment was synced above, as root; at run time `uv run` only runs it.
ENV TMS_HOST=0.0.0.0 \
    TMS_PORT=8000 \
    TMS_DATA_DIR=/data \
    UV_NO_SYNC=1 \
    UV_CACHE_DIR=/tmp/uv-cache \
    PYTHONUNBUFFERED=1

VOLUME ["/data"]
EXPOSE 8000
USER tms

HEALTHCHECK --interval=30s --timeout=5s --start-period=60s \
    CMD ["python", "-c", "import os, urllib.request as u; u.urlopen('http://127.0.0.1:%s/healthz' % os.environ.get('TMS_PORT', '8000'), timeout=4)"]

# `uv run` passes SIGTERM on to `tms serve`, which shuts down cleanly and stops the embedded
# PostgreSQL, so `docker stop` leaves a consistent database behind.
CMD ["uv", "run", "--no-dev", "tms", "serve"]
