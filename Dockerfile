# fabricplan service image: API (`fabricplan serve`), Celery worker (`fabricplan worker`) and migrations
# (`fabricplan migrate`) all run from this one image; docker-compose.yml picks the command.
# Two stages: `deps` installs every locked package (requirements.lock: exact versions and hashes; regenerate
# it with `scripts/dev lock`) into /opt/venv, a layer that changes only with the lock; the final stage copies
# that venv and then the code, so a code change reinstalls nothing.
FROM python:3.11.13-slim-bookworm AS deps

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

COPY requirements.lock /tmp/requirements.lock
RUN python -m venv /opt/venv \
    && /opt/venv/bin/pip install --require-hashes -r /tmp/requirements.lock


FROM python:3.11.13-slim-bookworm

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PATH=/opt/venv/bin:$PATH

COPY --from=deps /opt/venv /opt/venv

WORKDIR /app

# Only what the package and its migrations need (no .venv, .git or local databases in the image).
COPY pyproject.toml README.md alembic.ini ./
COPY services ./services
COPY workers ./workers
COPY migrations ./migrations

# The project itself (the `fabricplan` console script) on top of the locked dependencies.
RUN pip install --no-deps .

# services.store.db finds alembic.ini and migrations/ next to the `services` package, and those two are
# not part of the installed distribution: import the package from /app so `fabricplan migrate` (and
# embedded-mode start-up) find them.
ENV PYTHONPATH=/app \
    FABRICPLAN_DATA_DIR=/data \
    NUMBA_CACHE_DIR=/app/.numba-cache

# Compile the numba kernels into the image's cache. numba uses a cache directory only if it can write
# there, so the service user below owns it.
RUN python -m services.compiler.warm

# /run/fabricplan/keys: the compose deployment's bootstrap key (a named volume takes this directory's owner
# and mode, so only the service user can read it)
RUN useradd --system --create-home --uid 10001 --user-group fabricplan \
    && mkdir -p /data /run/fabricplan/keys \
    && chown fabricplan:fabricplan /data /run/fabricplan/keys \
    && chmod 0700 /run/fabricplan/keys \
    && chown -R fabricplan:fabricplan /app/.numba-cache
USER fabricplan

EXPOSE 8000

CMD ["fabricplan", "serve", "--host", "0.0.0.0", "--port", "8000"]
