"""The agent REST API of shared/API.md (`/api/v1/`), one DRF view class per operation.

Owns: authentication and throttling (`auth`: Bearer keys, browser sessions with CSRF), the view
base that resolves the principal once (`base`), request/response serializers and the OpenAPI
details (`serializers`, `schema`, `tools`), the operations (`views`, `extract`, `transfer`), the
error rendering (`exceptions`) and the URLconf (`urls`).

May import: memory.access (principals, the Viewer, the authorization rule), memory.services,
memory.selectors, memory.search, memory.pipeline and memory.transfer entry points, memory.presenters,
memory.errors, tenants. Views stay thin: parse, call one service or selector, render. Nothing
outside this package imports it except the site URLconf and settings; in particular memory.pages
never does (tests/test_layout.py).
"""
