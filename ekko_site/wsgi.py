"""WSGI entry point (gunicorn ekko_site.wsgi)."""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "ekko_site.settings")
application = get_wsgi_application()

from ekko_site.inprocess import serve_background  # noqa: E402 - needs the apps loaded above

serve_background()  # without a broker, this process runs the background work and the sweeps
