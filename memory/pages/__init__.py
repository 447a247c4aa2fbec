"""Browser pages (HTMX) where people see, edit and forget what the agent remembers about them.

Owns: the page request's access (`access`: PageAccess built from memory.access's principal and
Viewer, the `tenant_page` decorator), the page views by group (`views/`), forms, labels, the reads
only pages need (`selectors`: filtered lists, facets, sessions, timelines) and the URLconf (`urls`).

May import: memory.access, memory.services, memory.selectors, memory.search, memory.transfer entry
points, memory.models, memory.errors, tenants. Never memory.api (tests/test_layout.py): what the
JSON API and the pages share lives below both, in memory.access.
"""
