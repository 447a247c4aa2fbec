"""The pipeline: the work that follows a turn — extraction runs, rule and model extractors, summaries, tasks.

It owns *when* extraction runs (`triggers`), *one run's lifecycle* (`runs`: claim, read, extract,
finish or fail, the retry sweep), *applying a plan* through the write service (`apply`) and what
it leaves alone (`guardrails`: already written, recent rejections), the
session's *summary step* (`summary_chain`), the plan format (`plans`), the gating of messages
(`gating`) and shared text helpers (`sentences`), the *rule-based extractor* split by topic
(`extractors/`), the OpenAI-compatible *chat model* (`chat_model`), the rule-based *summarizer*
(`summaries`), and the Celery *tasks* (one-line adapters) with the receivers of the services'
after-commit signals that queue them (`background`).

It may import `memory.services` (every write goes through them), `memory.rules`,
`memory.selectors`, `memory.visibility` and `memory.search` for reading, `memory.models` and
`tenants`; never `memory.api`, `memory.pages` or `memory.transfer`. The pure modules (`plans`,
`gating`, `sentences`, `extractors`, `summaries`) import no ORM. The pipeline writes no memory row
itself (only its own `ExtractionRun` state); the services never import the pipeline, they announce
committed writes through `memory.services.events`.
"""
