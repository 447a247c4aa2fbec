"""The pipeline: the work that follows a turn — extraction runs, rule and model extractors, summaries, tasks.

It owns *when* extraction runs (`triggers`), *one run's lifecycle* (`runs`: claim, read, extract,
finish or fail, the retry sweep), *applying a plan* through the write service (`apply`), the
session's *summary step* (`summary_chain`), the plan format (`plans`), the gating of messages
(`gating`) and shared text helpers (`sentences`), the *rule-based extractor* split by topic
(`extractors/`), the OpenAI-compatible *chat model* (`chat_model`), the rule-based *summarizer*
(`summaries`), and the Celery *tasks* (one-line adapters) with the post-commit hooks that queue
them (`background`).

It may import `memory.services` (every write goes through them), `memory.rules`,
`memory.selectors`, `memory.visibility` and `memory.search` for reading, `memory.models` and
`tenants`; never `memory.api`, `memory.pages` or `memory.transfer`. The pure modules (`plans`,
`gating`, `sentences`, `extractors`, `summaries`) import no ORM. Services reach the pipeline only
through `background` and `tasks`, imported lazily, so there is no import circle.
"""
