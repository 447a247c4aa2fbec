"""File formats ↔ memory rows: a workspace as an Ekko local SQLite file, a JSONL history, a Markdown mirror.

What each module owns:
- `sqlite_format` — the SQLite file layout (tables, columns, schema SQL), value codecs and
  `sqlite_file_inspect` (pure; no ORM).
- `signatures` — the row and search-text MACs that let an import trust this server's own rows.
- `sqlite_export` — `workspace_export_sqlite`, streaming a workspace into a file.
- `sqlite_import` — `workspace_import_sqlite`, the entry point; `sqlite_import_state` (what one import
  knows), `sqlite_import_messages` (messages, summaries), `sqlite_import_nodes`, `sqlite_import_events`
  (one module per table), `sqlite_rows` (validation of one file row).
- `report` — `ImportError_` (a file refused whole) and `ImportReport` (what an import did).
- `jsonl` — `messages_import_jsonl`; `markdown` — `workspace_export_markdown`.
- `selectors` — the reads every direction shares (the tenant's workspace, its audit events, members).

This package reads files and the database and decides what to import; it never writes memory tables
itself: the rows an import keeps are written by `memory.services.imports`. It may import
`memory.models`, `memory.rules`, `memory.services`, `memory.presenters` and `tenants`; nothing in
`memory.services`, `memory.rules` or `memory.search` imports it.
"""
