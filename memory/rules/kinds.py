"""The controlled kind catalogue (API.md "Default kind catalogue"), its synonyms and kind resolution.

A kind names the slot a memory fills and the rules its writes follow: type, domain and category
path, whether it is itemized, its default scope, whether it needs explicit user intent and the
shape of its value. Tenants add their own kinds (`memory.selectors.tenant_kinds`); `resolve_kind`
looks the defaults up first.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from memory.rules.errors import SchemaError
from memory.rules.scope_policy import SCOPES

NODE_TYPES: tuple[str, ...] = (
    "preference",
    "fact",
    "decision",
    "task",
    "recipe",
    "skill",
    "constraint",
    "correction",
)
VALUE_SHAPES: tuple[str, ...] = ("string", "object", "string_or_object", "any")
# The journal (seed 001's `daily`): one card per user per local date, appended to, outside the quota and
# outside default recall (memory.rules.journal).
JOURNAL_KIND = "journal"


@dataclass(frozen=True)
class KindSpec:
    """One controlled kind: the slot it fills and the rules its writes follow."""

    name: str
    slot_key: str
    type: str
    domain: str
    category_path: tuple[str, ...]
    itemized: bool
    default_scope: str
    requires_explicit_user_intent: bool
    value_shape: str
    required_value_keys: tuple[str, ...] = ()
    always_recalled: bool = False
    user_scope_needs_expiry: bool = False

    def __post_init__(self) -> None:
        # Tenant-defined kinds are built from stored data, so a bad one must fail loudly here.
        if not self.name or not self.slot_key or ":" in self.slot_key:
            raise SchemaError("invalid", "A kind needs a name and a slot key without ':'.", "kind.slotKey")
        if self.type not in NODE_TYPES:
            raise SchemaError("invalid", f"Kind type must be one of {', '.join(NODE_TYPES)}.", "kind.type")
        if self.default_scope not in SCOPES:
            raise SchemaError(
                "invalid", f"Kind default scope must be one of {', '.join(SCOPES)}.", "kind.defaultScope"
            )
        if self.value_shape not in VALUE_SHAPES:
            raise SchemaError(
                "invalid", f"Kind value shape must be one of {', '.join(VALUE_SHAPES)}.", "kind.valueShape"
            )


def _kind(
    name: str,
    slot_key: str,
    type_: str,
    category_path: str,
    *,
    itemized: bool,
    scope: str,
    intent: bool,
    shape: str,
    **extra: Any,
) -> KindSpec:
    path = tuple(category_path.split("/"))
    return KindSpec(
        name=name,
        slot_key=slot_key,
        type=type_,
        domain=path[0],
        category_path=path,
        itemized=itemized,
        default_scope=scope,
        requires_explicit_user_intent=intent,
        value_shape=shape,
        **extra,
    )


_FOOD = "生活技能/做饭/饮食偏好"

# API.md, "Default kind catalogue", row by row (the domain is the first element of the path).
# fmt: off
DEFAULT_KINDS: dict[str, KindSpec] = {
    spec.name: spec
    for spec in (
        _kind("food_avoidance", "avoid_ingredient", "preference", _FOOD,
              itemized=True, scope="user", intent=True, shape="string"),
        _kind("preferred_ingredient", "preferred_ingredient", "preference", _FOOD,
              itemized=True, scope="user", intent=True, shape="string"),
        _kind("flavor_profile", "flavor_profile", "preference", _FOOD,
              itemized=False, scope="user", intent=True, shape="object"),
        _kind("dietary_restriction", "dietary_restriction", "constraint", _FOOD,
              itemized=True, scope="user", intent=True, shape="string"),
        _kind("recipe", "recipe", "recipe", "生活技能/做饭/菜谱",
              itemized=True, scope="user", intent=False, shape="object"),
        _kind("language_preference", "language_preference", "preference", "沟通/语言",
              itemized=False, scope="user", intent=True, shape="string", always_recalled=True),
        _kind("interaction_contract", "interaction_contract", "preference", "沟通/称呼",
              itemized=False, scope="user", intent=True, shape="object", always_recalled=True,
              required_value_keys=("userRole", "assistantRole", "addressUserAs")),
        _kind("communication_preference", "communication_preference", "preference", "沟通/风格",
              itemized=True, scope="user", intent=True, shape="string", always_recalled=True),
        _kind("accessibility_need", "accessibility_need", "constraint", "沟通/无障碍",
              itemized=True, scope="user", intent=True, shape="string", always_recalled=True),
        _kind("home_location", "home_location", "fact", "个人/居住地",
              itemized=False, scope="user", intent=True, shape="object",
              required_value_keys=("city", "location")),
        _kind("personal_relationship", "personal_relationship", "fact", "个人/关系",
              itemized=True, scope="user", intent=True, shape="object"),
        _kind("hard_constraint", "hard_constraint", "constraint", "项目/约束",
              itemized=True, scope="workspace", intent=False, shape="string", always_recalled=True),
        _kind("project_context", "project_context", "fact", "项目/背景",
              itemized=True, scope="workspace", intent=False, shape="string_or_object"),
        _kind("decision", "decision", "decision", "项目/决策",
              itemized=True, scope="workspace", intent=False, shape="string_or_object"),
        _kind("task", "task", "task", "任务",
              itemized=True, scope="session", intent=False, shape="object", required_value_keys=("status",)),
        _kind("skill", "skill", "skill", "技能",
              itemized=True, scope="user", intent=False, shape="string_or_object"),
        _kind("temporary_state", "temporary_state", "constraint", "通用/临时",
              itemized=True, scope="session", intent=False, shape="string", user_scope_needs_expiry=True),
        _kind("correction", "correction", "correction", "通用/纠正",
              itemized=True, scope="session", intent=False, shape="string"),
        _kind(JOURNAL_KIND, "journal", "fact", "个人/日记",
              itemized=True, scope="user", intent=True, shape="string"),
    )
}
# fmt: on

ALWAYS_RECALLED_KINDS: frozenset[str] = frozenset(
    name for name, spec in DEFAULT_KINDS.items() if spec.always_recalled
)

KIND_SYNONYMS: dict[str, str] = {
    # API.md's synonyms, then every slot key that differs from its kind name.
    "disliked_ingredient": "food_avoidance",
    "avoid_food": "food_avoidance",
    "excluded_ingredient": "food_avoidance",
    **{spec.slot_key: spec.name for spec in DEFAULT_KINDS.values() if spec.slot_key != spec.name},
    # Unambiguous English variants agents tend to send.
    "disliked_food": "food_avoidance",
    "food_dislike": "food_avoidance",
    "avoided_ingredient": "food_avoidance",
    "favorite_ingredient": "preferred_ingredient",
    "favourite_ingredient": "preferred_ingredient",
    "liked_ingredient": "preferred_ingredient",
    "flavour_profile": "flavor_profile",
    "flavor_preference": "flavor_profile",
    "taste_preference": "flavor_profile",
    "diet_restriction": "dietary_restriction",
    "dietary_requirement": "dietary_restriction",
    "preferred_language": "language_preference",
    "communication_style": "communication_preference",
    "accessibility_requirement": "accessibility_need",
    "home_city": "home_location",
    "residence": "home_location",
    "relationship": "personal_relationship",
    "project_constraint": "hard_constraint",
    "project_fact": "project_context",
    "project_decision": "decision",
    "todo": "task",
    "todo_item": "task",
    "temporary_constraint": "temporary_state",
    "user_correction": "correction",
    "daily": JOURNAL_KIND,
    "diary": JOURNAL_KIND,
    "journal_entry": JOURNAL_KIND,
}


def _normalize_kind_name(name: str) -> str:
    return re.sub(r"[\s\-]+", "_", unicodedata.normalize("NFKC", name).strip().lower())


def resolve_kind(name: str, extra_kinds: Mapping[str, KindSpec] | None = None) -> KindSpec:
    """Return the kind named `name`, through synonyms, defaults first, then the tenant's own kinds."""
    normalized = _normalize_kind_name(name) if isinstance(name, str) else ""
    normalized = KIND_SYNONYMS.get(normalized, normalized)
    if normalized in DEFAULT_KINDS:
        return DEFAULT_KINDS[normalized]
    tenant_kinds = {_normalize_kind_name(key): spec for key, spec in (extra_kinds or {}).items()}
    if normalized in tenant_kinds:
        return tenant_kinds[normalized]
    known = ", ".join(sorted({*DEFAULT_KINDS, *(spec.name for spec in tenant_kinds.values())}))
    raise SchemaError("invalid", f"Unknown kind {name!r}; use one of: {known}.", "node.kind")
