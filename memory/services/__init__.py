"""Memory services: the only code that creates, updates or deletes memory rows.

One module per entity, each write a keyword-only function named `<entity>_<action>` that takes the
resolved viewer (and so the tenant), runs in one transaction bound to that tenant, enforces the
guards (`guards`) and the pure rules (`memory.rules`), writes its audit event (`audit`) in the
same transaction and announces follow-up work after commit (`events`):

- `messages`: evidence capture (`message_append_batch`)
- `summaries`: the session summary chain (`summary_append`)
- `nodes`: card writes (`node_write_batch`, and `node_write_bulk` for extraction and imports)
- `forget`: soft and hard forget, restore (`node_forget`, `node_restore`)
- `maintenance`: the expiry sweep and access counting (`nodes_expire_due`; `node_access_queue` after
  commit, applied by `node_access_record`)
- `embeddings`: vectors for nodes and messages (derived data: no revision, no audit)
- `imports`, `imports_nodes`: the rows an SQLite or JSONL import keeps (staged, then one statement each)
- `guards`, `audit`, `events`: the shared checks, the audit-event writer, the after-commit signals

May import: memory.models, memory.rules, memory.selectors, memory.visibility, memory.presenters,
memory.errors and tenants — never memory.pipeline, memory.search (except the embedding provider in
`embeddings`), memory.api, memory.pages or memory.transfer (tests/test_structure.py checks it). Those
call the services; the services announce work through `events` instead of calling them back.

The names below are re-exported so callers may write `from memory import services`.
"""

from memory.services.forget import ForgetRequest, node_forget, node_restore
from memory.services.guards import MAX_OPERATIONS
from memory.services.maintenance import node_access_queue, node_access_record, nodes_expire_due
from memory.services.messages import message_append_batch
from memory.services.nodes import BulkOutcome, NodeWrite, WriteResult, node_write_batch, node_write_bulk
from memory.services.summaries import summary_append

__all__ = [
    "MAX_OPERATIONS", "BulkOutcome", "ForgetRequest", "NodeWrite", "WriteResult", "message_append_batch",
    "node_access_queue", "node_access_record", "node_forget", "node_restore", "node_write_batch",
    "node_write_bulk", "nodes_expire_due", "summary_append",
]
