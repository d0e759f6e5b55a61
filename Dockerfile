# fabricplan service image: API (`fabricplan serve`), Celery worker (`fabricplan worker`) and migrations
# (`fabricplan migrate`) all run from this one image; docker-compose.yml picks the command.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app

# Only what the package and its migrations need (no .venv, .git or local databases in the image).
COPY pyproject.toml README.md alembic.ini ./
COPY services ./services
COPY workers ./workers
COPY migrations ./migrations

# Installs the pinned dependencies and the `fabricplan` console script.
RUN pip install .

# services.store.db finds alembic.ini and migrations/ next to the `services` package, and those two are
# not part of the installed distribution: import the package from /app so `fabricplan migrate` (and
# embedded-mode start-up) find them.
ENV PYTHONPATH=/app \
    FABRICPLAN_DATA_DIR=/data \
    NUMBA_CACHE_DIR=/app/.numba-cache

# Compile the numba kernels into the image's cache. numba uses a cache directory only if it can write
# there, so the service user below owns it.
RUN python -m services.compiler.warm

RUN useradd --system --create-home --uid 10001 --user-group fabricplan \
    && mkdir -p /data \
    && chown fabricplan:fabricplan /data \
    && chown -R fabricplan:fabricplan /app/.numba-cache
USER fabricplan

EXPOSE 8000

CMD ["fabricplan", "serve", "--host", "0.0.0.0", "--port", "8000"]
