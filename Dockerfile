FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
WORKDIR /app
COPY pyproject.toml README.md ./
COPY ekko_site ekko_site
COPY memory memory
COPY tenants tenants
RUN pip install --no-cache-dir .
COPY . .
# Build-time only values (not kept in the image): collectstatic needs settings, not a database or a real key.
RUN DATABASE_URL=postgres://build@localhost/build DJANGO_SECRET_KEY=collectstatic-build-only \
    python manage.py collectstatic --noinput --verbosity 0
EXPOSE 8000
# The ASGI entry (the API, the pages and the MCP server at /mcp) on uvicorn workers; gunicorn.conf.py
# prepares PROMETHEUS_MULTIPROC_DIR when it is set (docs/operations.md).
CMD ["gunicorn", "ekko_site.asgi", "--worker-class", "uvicorn_worker.UvicornWorker", "--bind", "0.0.0.0:8000", \
     "--workers", "3"]
