"""Signed webhooks: tenant admins register endpoints; memory changes and finished extractions reach them.

The tenant's audit log is the outbox: a write's audit events commit with the write, and after the
commit (`outbox.webhooks_announce`) a Celery task turns the events past each endpoint's cursor into
`WebhookDelivery` rows and sends them, signed (`signing`), retried with backoff, pausing an endpoint
that keeps failing (`delivery`). A finished extraction run writes its deliveries in its own
transaction. Bodies are built at send time (`events`) and never stored, so a forgotten card's
content is never sent after its forget. `services` owns endpoint changes; `urls` guards targets.
Imports: memory.models, memory.presenters, tenants; never the pages or the API.
"""
