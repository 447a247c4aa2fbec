"""Page views, one module per page group: one function per page, one template per page.

Each view gets the resolved `PageAccess` (memory.pages.access), reads through selectors and
changes memory only through memory.services.nodes (tenants.services for API keys). An htmx request
gets the page's named partial (`page.html#fragment`) from the same view; a plain request the
full page, so every link and form also works without JavaScript. Side effects reach the
browser through `HX-Trigger` events (`memoriesChanged`), never inline scripts.

Groups: `signin` (sign in/out), `dashboard` (dashboard and switchers), `memories` (list, bulk
forget, detail, edit, forget, restore), `sessions`, `api_keys`, `workspace` (export/import);
`common` holds what they share.
"""
