"""Organizer bench: merge precision and recall on 1,000 generated cards of one person.

About 300 cards are labelled near-duplicates (one memory written 2–4 times: reworded in the same language,
translated between English and Chinese, or under a synonym item key); the rest are distinct memories,
among them look-alikes that must stay apart (舅舅 vs 叔叔, "allergic to shellfish" vs "loves shrimp",
likes vs avoids the same food, the same sentence with another number). The cards are written through
the write service into a fresh tenant, embedded with the configured provider, and organized by the
offline rules (a manual run in auto_low mode on unreviewed cards, so every merge applies). Precision
and recall are pairwise over the labelled groups: a pair of cards is predicted together when the run
merged them into one card. `--split dev|held-out` picks disjoint sentence templates, so the rules are
not tuned to one phrasing.

    .venv/bin/python bench/organizer.py --split dev
    .venv/bin/python bench/organizer.py --split held-out
"""

from __future__ import annotations

import argparse
import itertools
import random
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import git_revision, lift_card_limit, load_average, machine, setup_django  # noqa: E402

FOODS = [
    ("coffee", "咖啡"),
    ("tea", "茶"),
    ("milk", "牛奶"),
    ("cilantro", "香菜"),
    ("peanuts", "花生"),
    ("shellfish", "贝类"),
    ("shrimp", "虾"),
    ("beef", "牛肉"),
    ("pork", "猪肉"),
    ("garlic", "大蒜"),
    ("onion", "洋葱"),
    ("mushrooms", "蘑菇"),
    ("tofu", "豆腐"),
    ("durian", "榴莲"),
    ("chocolate", "巧克力"),
    ("tomatoes", "番茄"),
    ("potatoes", "土豆"),
    ("lamb", "羊肉"),
    ("eggs", "鸡蛋"),
    ("fish", "鱼"),
    ("chicken", "鸡肉"),
    ("rice", "米饭"),
    ("noodles", "面条"),
    ("alcohol", "酒"),
    ("sugar", "糖"),
]
# Synonym item keys of the same concept (the concept map knows them; the writer's key differs).
SYNONYM_KEYS = {
    "cilantro": "coriander",
    "shrimp": "prawn",
    "coffee": "espresso",
    "lamb": "mutton",
    "tomatoes": "番茄",
    "potatoes": "马铃薯",
    "chicken": "鸡肉",
}
KIN = [
    ("maternal uncle", "舅舅"),
    ("paternal uncle", "叔叔"),
    ("mother", "妈妈"),
    ("father", "爸爸"),
    ("older sister", "姐姐"),
    ("younger brother", "弟弟"),
    ("maternal grandmother", "外婆"),
    ("paternal grandmother", "奶奶"),
    ("wife", "妻子"),
    ("daughter", "女儿"),
]
STYLES = [
    ("dark mode", "深色模式"),
    ("concise answers", "简洁的回答"),
    ("detailed explanations", "详细的解释"),
    ("tabs", "制表符"),
    ("python", "Python"),
    ("rust", "Rust"),
    ("english", "英文"),
    ("typescript", "TypeScript"),
]
HOBBIES = [
    ("running", "跑步"),
    ("swimming", "游泳"),
    ("tea", "茶"),
    ("coffee", "咖啡"),
    ("chocolate", "巧克力"),
]

TEMPLATES = {
    "dev": {
        "avoid_en": ["User avoids {en}.", "Does not eat {en}.", "No {en} in any dish, please."],
        "avoid_zh": ["用户不吃{zh}。", "做菜不要放{zh}。"],
        "like_en": ["User loves {en}.", "Really likes {en}."],
        "like_zh": ["用户喜欢{zh}。", "很爱吃{zh}。"],
        "kin_en": ["The user's {kin_en} enjoys {hob_en}.", "Their {kin_en} is into {hob_en}."],
        "kin_zh": ["用户的{kin_zh}喜欢{hob_zh}。"],
        "allergy_en": ["Allergic to {en}."],
        "want_en": ["Prefers {en}.", "Wants {en} whenever possible."],
        "want_zh": ["用户偏好{zh}。", "希望使用{zh}。"],
        "nowant_en": ["Does not want {en}.", "Please avoid {en}."],
        "nowant_zh": ["不要用{zh}。", "用户不喜欢{zh}。"],
        "filler": [
            "Invoice {n} for {name} is due on day {d}.",
            "{name} booked room {n} for the offsite.",
            "The {name} service listens on port {n}.",
        ],
    },
    "held-out": {
        "avoid_en": [
            "Never serve {en} to this user.",
            "Can't stand {en} at all.",
            "Keep meals free of {en}.",
        ],
        "avoid_zh": ["{zh}一口都不碰。", "别给用户吃{zh}。"],
        "like_en": ["A big fan of {en}.", "Enjoys {en} a lot."],
        "like_zh": ["最爱{zh}了。", "特别喜欢{zh}。"],
        "kin_en": ["{kin_en} of the user loves {hob_en}.", "User says the {kin_en} enjoys {hob_en}."],
        "kin_zh": ["{kin_zh}平时爱{hob_zh}。"],
        "allergy_en": ["Has an allergy to {en}."],
        "want_en": ["Asks for {en} every time.", "Happiest with {en}."],
        "want_zh": ["总是要{zh}。", "最喜欢{zh}。"],
        "nowant_en": ["Never use {en} with this user.", "Hates {en}."],
        "nowant_zh": ["别用{zh}。", "讨厌{zh}。"],
        "filler": [
            "{name} asked for report {n} by week {d}.",
            "Ticket {n} belongs to {name}.",
            "Build {n} of {name} failed on step {d}.",
        ],
    },
}
NAMES = [
    "Avery",
    "Bao",
    "Chen",
    "Dmitri",
    "Elif",
    "Farah",
    "Goran",
    "Hana",
    "Ines",
    "Jun",
    "Kofi",
    "Lena",
    "Mateo",
    "Nia",
    "Oskar",
    "Priya",
    "Quinn",
    "Ravi",
    "Sora",
    "Tariq",
]


def _card(kind: str, item_key: str, text: str, group: str | None) -> dict:
    card = {"kind": kind, "item_key": item_key, "text": text, "group": group}
    if kind == "personal_relationship":
        card["value"] = {"note": text}
    return card


def generate(split: str, seed: int = 1) -> list[dict]:
    """Return the split's cards: kind, item_key, text and the duplicate group (None when unique)."""
    rng = random.Random(f"{seed}-{split}")
    t = TEMPLATES[split]
    cards: list[dict] = []
    used_keys: set[tuple[str, str]] = set()

    def add(kind: str, key: str, text: str, group: str | None) -> None:
        base, n = key, 2
        while (kind, key) in used_keys:
            key, n = f"{base}_{n}", n + 1
        used_keys.add((kind, key))
        cards.append(_card(kind, key, text, group))

    combos = (
        [("food_avoidance", en, zh, "avoid") for en, zh in FOODS]
        + [("preferred_ingredient", en, zh, "like") for en, zh in FOODS]
        + [("communication_preference", en, zh, pol) for en, zh in STYLES for pol in ("want", "nowant")]
    )
    rng.shuffle(combos)
    for index, (kind, en, zh, polarity) in enumerate(combos):
        if rng.random() < 0.15:
            # A single card: the look-alike of another group (same thing, other polarity or kind).
            add(kind, en, rng.choice(t[f"{polarity}_en"]).format(en=en), None)
            continue
        group = f"g{index}"
        size = rng.choice([2, 3, 3, 4, 4, 4])
        variants = [("en", en), ("zh", zh), ("en", SYNONYM_KEYS.get(en, en)), ("zh", zh)][:size]
        for lang, key in variants:
            template = rng.choice(t[f"{polarity}_{lang}"])
            add(kind, key, template.format(en=en, zh=zh), group)
    # Relatives: each (relative, hobby) once in English and once in Chinese; other relatives stay apart.
    for (kin_en, kin_zh), (hob_en, hob_zh) in itertools.product(KIN, HOBBIES):
        group = f"k-{kin_en}-{hob_en}"
        values = {"kin_en": kin_en, "kin_zh": kin_zh, "hob_en": hob_en, "hob_zh": hob_zh}
        if rng.random() < 0.9:
            add(
                "personal_relationship", f"{kin_en}_{hob_en}", rng.choice(t["kin_en"]).format(**values), group
            )
            add("personal_relationship", f"{kin_zh}{hob_zh}", rng.choice(t["kin_zh"]).format(**values), group)
        else:
            add("personal_relationship", f"{kin_en}_{hob_en}", rng.choice(t["kin_en"]).format(**values), None)
    # Allergies next to liked look-alikes: "allergic to shellfish" vs "loves shrimp".
    for en, _zh in FOODS[:12]:
        add("dietary_restriction", f"{en}_allergy", rng.choice(t["allergy_en"]).format(en=en), None)
    while len(cards) < 1000:
        name = rng.choice(NAMES)
        text = rng.choice(t["filler"]).format(name=name, n=rng.randint(100, 99999), d=rng.randint(1, 28))
        add("project_context", f"{name.lower()}_{rng.randint(0, 10**6)}", text, None)
    return cards[:1000]


def _write(cards: list[dict], split: str):  # noqa: ANN202
    from django.contrib.auth import get_user_model

    from memory.services.embeddings import nodes_embed
    from memory.services.nodes import NodeWrite, node_write_bulk
    from memory.visibility import Viewer
    from tenants.context import tenant_context
    from tenants.models import Workspace
    from tenants.services import tenant_create

    setup = tenant_create(slug=f"orgbench-{split}-{uuid.uuid4().hex[:6]}", owner_username="orgbench")
    lift_card_limit(setup)
    user = get_user_model().objects.get(username="orgbench")
    with tenant_context(setup.tenant):
        workspace = Workspace.objects.get(tenant=setup.tenant, slug=Workspace.DEFAULT_SLUG)
    viewer = Viewer(
        tenant=setup.tenant,
        workspace=workspace,
        user=user,
        write_scopes=frozenset({"user"}),
        read_only=False,
        actor="bench:organizer",
    )
    writes = []
    for card in cards:
        node = {
            "kind": card["kind"],
            "item_key": card["item_key"],
            "scope": "user",
            "title": card["text"][:80],
            "content": card["text"],
            "value_json": card.get("value", card["text"]),
            "value_json_given": True,
            "confidence": 0.8,
        }
        writes.append(
            NodeWrite(
                viewer=viewer,
                operations=[{"operation": "create", "node": node, "reason": "organizer bench"}],
                explicit_user_intent=True,
            )
        )
    started = time.perf_counter()
    outcomes = []
    for start in range(0, len(writes), 100):
        outcomes.extend(node_write_bulk(writes=writes[start : start + 100], skip_invalid=True))
    failed = [o.error for o in outcomes if not o.ok]
    if failed:
        raise SystemExit(f"{len(failed)} bench cards were refused, first: {failed[0]}")
    ids = [o.results[0].node.pk for o in outcomes]
    _unreview(setup.tenant, ids)
    for start in range(0, len(ids), 100):
        nodes_embed(tenant_id=setup.tenant.pk, node_ids=[str(i) for i in ids[start : start + 100]])
    return viewer, ids, time.perf_counter() - started


def _unreview(tenant, ids) -> None:  # noqa: ANN001
    """Extracted-looking cards: nobody reviewed them, so the gate lets low-risk merges apply; written
    without evidence messages they were downgraded by the confidence contract, so they get an extractor's."""
    from memory.models import MemoryNode
    from tenants.context import tenant_context

    with tenant_context(tenant):
        MemoryNode.objects.filter(tenant=tenant, pk__in=ids).update(review_state="unreviewed", confidence=0.8)


def pairwise(
    groups_true: dict[str, str | None], merged_into: dict[str, str]
) -> tuple[float, float, int, int]:
    """Return (precision, recall, predicted pairs, true pairs) over card pairs."""

    def pairs(labels: dict[str, str]) -> set[frozenset[str]]:
        by: dict[str, list[str]] = {}
        for card, label in labels.items():
            by.setdefault(label, []).append(card)
        return {frozenset(p) for members in by.values() for p in itertools.combinations(members, 2)}

    true = pairs({c: g for c, g in groups_true.items() if g is not None})
    predicted = pairs(merged_into)
    hits = len(true & predicted)
    precision = hits / len(predicted) if predicted else 1.0
    recall = hits / len(true) if true else 1.0
    return precision, recall, len(predicted), len(true)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--split", choices=["dev", "held-out"], default="dev")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--no-guards", action="store_true",
                        help="ablation: keep only the kind guard (what the look-alike guards buy)")
    args = parser.parse_args()
    setup_django()
    if args.no_guards:
        from memory.organizer import cluster, gate

        cluster.lookalike_reason = gate.lookalike_reason = lambda a, b: "kind" if a.kind != b.kind else None
    from memory.models import OrganizeItem
    from memory.organizer.runs import organize_request, organize_run
    from tenants.context import tenant_context

    cards = generate(args.split, args.seed)
    viewer, ids, write_seconds = _write(cards, args.split)
    labels = {str(node_id): card["group"] for node_id, card in zip(ids, cards, strict=True)}
    started = time.perf_counter()
    run = organize_request(viewer=viewer, scope="user", mode="auto_low")
    organize_run(tenant_id=viewer.tenant.pk, run_id=str(run.pk))  # unless the in-process worker took it
    with tenant_context(viewer.tenant):
        while run.state not in ("done", "failed"):
            time.sleep(0.05)
            run.refresh_from_db()
    run_seconds = time.perf_counter() - started
    with tenant_context(viewer.tenant):
        items = list(OrganizeItem.objects.filter(tenant=viewer.tenant, run=run))
    merged = {str(m): str(item.pk) for item in items if item.decision == "applied" for m in item.members}
    merged.update({c: f"solo-{c}" for c in labels if c not in merged})
    precision, recall, predicted, true = pairwise(labels, merged)
    dup_cards = sum(1 for g in labels.values() if g is not None)
    print(
        f"split={args.split} seed={args.seed} guards={'kind only' if args.no_guards else 'all'} "
        f"cards={len(cards)} labelled_duplicates={dup_cards} "
        f"duplicate_groups={len({g for g in labels.values() if g})}"
    )
    print(f"merge precision={precision:.3f} recall={recall:.3f} (pairs predicted={predicted} true={true})")
    print(
        f"run state={run.state} items={len(items)} applied={sum(i.decision == 'applied' for i in items)} "
        f"rejected={run.rejections} before={run.cards_before} after={run.cards_after} "
        f"compression_ratio={run.compression_ratio}"
    )
    print(f"organize_run={run_seconds:.2f}s write+embed={write_seconds:.1f}s")
    print(f"machine: {machine()} load: {load_average()} commit: {git_revision()}")


if __name__ == "__main__":
    main()
