"""Unit tests for the pure rules of memory/rules/ (kinds, item keys, values, sensitive content, confidence,
scope policy, queries): one test per rule, no database."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memory import rules
from memory.rules.confidence import (
    LOW_CONFIDENCE_CAP,
    LOW_CONFIDENCE_OMIT_BELOW,
    MEDIUM_CONFIDENCE_CAP,
    apply_confidence_contract,
)
from memory.rules.errors import SchemaError
from memory.rules.item_keys import canonical_key, normalize_item_key
from memory.rules.kinds import (
    ALWAYS_RECALLED_KINDS,
    DEFAULT_KINDS,
    KIND_SYNONYMS,
    NODE_TYPES,
    KindSpec,
    resolve_kind,
)
from memory.rules.queries import is_list_all_query
from memory.rules.scope_policy import SCOPES, validate_scope_for_write
from memory.rules.sensitive import cn_resident_id_valid, find_sensitive_content, luhn_valid
from memory.rules.values import normalize_value, validate_value

# --------------------------------------------------------------------------- helpers


def assert_schema_error(exc_info: pytest.ExceptionInfo[SchemaError], code: str, field: str) -> None:
    error = exc_info.value
    assert (error.code, error.field) == (code, field), f"got {error.code} on {error.field}: {error.detail}"
    assert error.detail and error.detail.endswith("."), "detail must be a whole sentence saying how to fix it"


def scope_for(
    kind: str,
    scope: str,
    *,
    intent: bool = True,
    expires: bool = False,
    allowed: tuple[str, ...] = ("session", "workspace", "user"),
) -> str:
    return validate_scope_for_write(
        spec=DEFAULT_KINDS[kind],
        scope=scope,
        explicit_user_intent=intent,
        expires_at_set=expires,
        allowed_scopes=allowed,
    )


# --------------------------------------------------------------------------- module purity


def test_rules_modules_import_no_django():
    for path in Path(rules.__file__).parent.glob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        imported = {
            alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names
        } | {node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
        outside = {name for name in imported if not name.startswith("memory.rules")}
        assert not any(
            name.split(".")[0] in {"django", "rest_framework", "memory", "tenants"} for name in outside
        ), f"{path.name} must stay pure: import only the standard library and memory.rules"


# --------------------------------------------------------------------------- kind catalogue

# API.md "Default kind catalogue": kind, slot key, type, domain, categoryPath, itemized, scope, intent, shape.
# fmt: off
CATALOGUE = [
    ("food_avoidance", "avoid_ingredient", "preference", "生活技能", "生活技能/做饭/饮食偏好",
     True, "user", True, "string"),
    ("preferred_ingredient", "preferred_ingredient", "preference", "生活技能", "生活技能/做饭/饮食偏好",
     True, "user", True, "string"),
    ("flavor_profile", "flavor_profile", "preference", "生活技能", "生活技能/做饭/饮食偏好",
     False, "user", True, "object"),
    ("dietary_restriction", "dietary_restriction", "constraint", "生活技能", "生活技能/做饭/饮食偏好",
     True, "user", True, "string"),
    ("recipe", "recipe", "recipe", "生活技能", "生活技能/做饭/菜谱",
     True, "user", False, "object"),
    ("language_preference", "language_preference", "preference", "沟通", "沟通/语言",
     False, "user", True, "string"),
    ("interaction_contract", "interaction_contract", "preference", "沟通", "沟通/称呼",
     False, "user", True, "object"),
    ("communication_preference", "communication_preference", "preference", "沟通", "沟通/风格",
     True, "user", True, "string"),
    ("accessibility_need", "accessibility_need", "constraint", "沟通", "沟通/无障碍",
     True, "user", True, "string"),
    ("home_location", "home_location", "fact", "个人", "个人/居住地",
     False, "user", True, "object"),
    ("personal_relationship", "personal_relationship", "fact", "个人", "个人/关系",
     True, "user", True, "object"),
    ("hard_constraint", "hard_constraint", "constraint", "项目", "项目/约束",
     True, "workspace", False, "string"),
    ("project_context", "project_context", "fact", "项目", "项目/背景",
     True, "workspace", False, "string_or_object"),
    ("decision", "decision", "decision", "项目", "项目/决策",
     True, "workspace", False, "string_or_object"),
    ("task", "task", "task", "任务", "任务",
     True, "session", False, "object"),
    ("skill", "skill", "skill", "技能", "技能",
     True, "user", False, "string_or_object"),
    ("temporary_state", "temporary_state", "constraint", "通用", "通用/临时",
     True, "session", False, "string"),
    ("correction", "correction", "correction", "通用", "通用/纠正",
     True, "session", False, "string"),
    # Issue 14 (seed 001's `daily`), documented in docs/memory-rules.md, "The journal".
    ("journal", "journal", "fact", "个人", "个人/日记",
     True, "user", True, "string"),
]
# fmt: on


def test_default_catalogue_has_exactly_the_kinds_of_the_api_contract_and_the_journal():
    assert set(DEFAULT_KINDS) == {row[0] for row in CATALOGUE}
    assert len(DEFAULT_KINDS) == 19


@pytest.mark.parametrize(
    ("name", "slot_key", "type_", "domain", "path", "itemized", "scope", "intent", "shape"),
    CATALOGUE,
    ids=[row[0] for row in CATALOGUE],
)
def test_default_kind_matches_the_api_contract(
    name, slot_key, type_, domain, path, itemized, scope, intent, shape
):
    spec = DEFAULT_KINDS[name]
    assert spec.name == name
    assert (spec.slot_key, spec.type, spec.domain, "/".join(spec.category_path)) == (
        slot_key,
        type_,
        domain,
        path,
    )
    assert (spec.itemized, spec.default_scope, spec.requires_explicit_user_intent) == (
        itemized,
        scope,
        intent,
    )
    assert spec.value_shape == shape
    assert spec.type in NODE_TYPES and spec.default_scope in SCOPES


def test_required_value_keys_and_expiry_flag_follow_the_catalogue():
    required = {
        name: spec.required_value_keys for name, spec in DEFAULT_KINDS.items() if spec.required_value_keys
    }
    assert required == {
        "interaction_contract": ("userRole", "assistantRole", "addressUserAs"),
        "home_location": ("city", "location"),
        "task": ("status",),
    }
    assert [name for name, spec in DEFAULT_KINDS.items() if spec.user_scope_needs_expiry] == [
        "temporary_state"
    ]


def test_always_recalled_kinds_are_the_five_of_the_api_contract():
    assert ALWAYS_RECALLED_KINDS == {
        "interaction_contract",
        "language_preference",
        "accessibility_need",
        "communication_preference",
        "hard_constraint",
    }
    assert all(DEFAULT_KINDS[name].always_recalled for name in ALWAYS_RECALLED_KINDS)


def test_enumerations_are_the_api_values():
    assert NODE_TYPES == (
        "preference",
        "fact",
        "decision",
        "task",
        "recipe",
        "skill",
        "constraint",
        "correction",
    )
    assert SCOPES == ("session", "workspace", "user", "global")


@pytest.mark.parametrize(
    "synonym", ["disliked_ingredient", "avoid_food", "excluded_ingredient", "avoid_ingredient"]
)
def test_synonyms_resolve_to_food_avoidance(synonym):
    assert resolve_kind(synonym).name == "food_avoidance"


def test_every_synonym_points_at_a_default_kind_and_shadows_none():
    assert all(target in DEFAULT_KINDS for target in KIND_SYNONYMS.values())
    assert not set(KIND_SYNONYMS) & set(DEFAULT_KINDS)
    for spec in DEFAULT_KINDS.values():
        assert resolve_kind(spec.slot_key) is spec


@pytest.mark.parametrize(
    "raw", ["  Food-Avoidance ", "FOOD AVOIDANCE", "food_avoidance", "Disliked-Ingredient"]
)
def test_resolve_kind_normalises_case_spaces_and_dashes(raw):
    assert resolve_kind(raw) is DEFAULT_KINDS["food_avoidance"]


def test_resolve_kind_finds_tenant_kinds_after_the_defaults():
    wine = KindSpec(
        name="wine_preference",
        slot_key="wine_preference",
        type="preference",
        domain="生活技能",
        category_path=("生活技能", "饮品"),
        itemized=True,
        default_scope="user",
        requires_explicit_user_intent=True,
        value_shape="string",
    )
    impostor = KindSpec(
        name="task",
        slot_key="tenant_task",
        type="task",
        domain="x",
        category_path=("x",),
        itemized=False,
        default_scope="session",
        requires_explicit_user_intent=False,
        value_shape="any",
    )
    assert resolve_kind("Wine Preference", {"wine_preference": wine}) is wine
    assert resolve_kind("task", {"task": impostor}) is DEFAULT_KINDS["task"]


@pytest.mark.parametrize("raw", ["favourite_color", "", "   "])
def test_unknown_kind_is_invalid_and_lists_the_known_kinds(raw):
    with pytest.raises(SchemaError) as exc_info:
        resolve_kind(raw)
    assert_schema_error(exc_info, "invalid", "node.kind")
    assert "food_avoidance" in exc_info.value.detail and "temporary_state" in exc_info.value.detail


def test_kind_spec_refuses_values_outside_the_enumerations():
    with pytest.raises(SchemaError) as exc_info:
        KindSpec(
            name="x",
            slot_key="x",
            type="opinion",
            domain="d",
            category_path=("d",),
            itemized=False,
            default_scope="user",
            requires_explicit_user_intent=False,
            value_shape="string",
        )
    assert_schema_error(exc_info, "invalid", "kind.type")


# --------------------------------------------------------------------------- item keys and canonical keys


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("Cilantro", "cilantro"),
        ("ＨＥＲＭＥＳ　Ｓｔｕｄｉｏ", "hermes_studio"),  # full-width letters and space (NFKC)
        ("Hermes-Studio", "hermes_studio"),
        ("hermes / studio", "hermes_studio"),
        ("node.js", "node_js"),
        ("team:backend", "team_backend"),
        ("__a--b__", "a_b"),
        ("香菜", "香菜"),
        ("Sichuan 川菜", "sichuan_川菜"),
        ("it's", "its"),
        ("C++", "c_plus_plus"),
        ("C#", "c_sharp"),
        ("Project ２０２５", "project_2025"),
    ],
)
def test_item_key_normalisation_nfkc_case_and_separators(raw, expected):
    assert normalize_item_key(raw) == expected


@pytest.mark.parametrize(
    "raw",
    [
        "I really do not like cilantro at all",  # more than six words
        "I hate cilantro.",  # sentence punctuation
        "不要放香菜！",
        "我不喜欢吃香菜因为味道太冲了真的很难吃",  # a Chinese sentence without spaces
        "x" * 65,
    ],
)
def test_item_key_refuses_sentences(raw):
    with pytest.raises(SchemaError) as exc_info:
        normalize_item_key(raw)
    assert_schema_error(exc_info, "invalid", "node.itemKey")


@pytest.mark.parametrize(
    "raw",
    [
        "2024-05-01",
        "2024/5/1",
        "2024-05-01T10:00:00Z",
        "trip_2024_05_01",
        "2024年5月1日",
        "20240501",
        "1700000000",
        "1700000000000",
        "at 10:30",
    ],
)
def test_item_key_refuses_timestamps_and_dates(raw):
    with pytest.raises(SchemaError) as exc_info:
        normalize_item_key(raw)
    assert_schema_error(exc_info, "invalid", "node.itemKey")


@pytest.mark.parametrize(
    "raw",
    [
        "550e8400-e29b-41d4-a716-446655440000",
        "550E8400E29B41D4A716446655440000",
        "3f786850e387550fdab836ed7e6dc881de23001b",
        "aGVsbG8gd29ybGQ9Zm9vYmFy",
        "x7k9q2m4p8r1t5w3",
    ],
)
def test_item_key_refuses_uuids_and_random_tokens(raw):
    with pytest.raises(SchemaError) as exc_info:
        normalize_item_key(raw)
    assert_schema_error(exc_info, "invalid", "node.itemKey")


@pytest.mark.parametrize("raw", ["", "   ", "---", "!!!"])
def test_item_key_refuses_empty_results(raw):
    with pytest.raises(SchemaError) as exc_info:
        normalize_item_key(raw)
    assert_schema_error(exc_info, "invalid", "node.itemKey")


@pytest.mark.parametrize(
    "raw", ["HermesStudio2024", "iPhone15ProMax", "q3_2024_roadmap", "ipv6", "16:9 screens"]
)
def test_item_key_keeps_ordinary_concepts_with_numbers(raw):
    assert normalize_item_key(raw)


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("abcXYZ019 _-./:+#香菜。!?ＡＢ１２　é·、'")), max_size=30))
def test_item_key_normalisation_is_idempotent(raw):
    """A stored itemKey is normalised again on supersede, so it must map to itself."""
    try:
        key = normalize_item_key(raw)
    except SchemaError:
        return
    assert normalize_item_key(key) == key


def test_canonical_key_for_itemized_kind_is_slot_and_normalised_item():
    assert canonical_key(DEFAULT_KINDS["food_avoidance"], " Cilantro ") == "avoid_ingredient:cilantro"
    assert canonical_key(DEFAULT_KINDS["project_context"], "Hermes Studio") == "project_context:hermes_studio"


def test_canonical_key_for_single_slot_kind_ignores_item_key():
    assert canonical_key(DEFAULT_KINDS["flavor_profile"], None) == "flavor_profile"
    assert canonical_key(DEFAULT_KINDS["flavor_profile"], "spicy") == "flavor_profile"


@pytest.mark.parametrize("item_key", [None, "", "  "])
def test_canonical_key_requires_item_key_for_itemized_kinds(item_key):
    with pytest.raises(SchemaError) as exc_info:
        canonical_key(DEFAULT_KINDS["food_avoidance"], item_key)
    assert_schema_error(exc_info, "invalid", "node.itemKey")
    assert "food_avoidance" in exc_info.value.detail


# --------------------------------------------------------------------------- values

FLAVOR = DEFAULT_KINDS["flavor_profile"]


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("少辣", {"spicy": "low"}),
        ("less spicy", {"spicy": "low"}),
        ("少油", {"oil": "low"}),
        ("less oil", {"oil": "low"}),
        ("少油少辣", {"oil": "low", "spicy": "low"}),
        ("less oil, less spicy", {"oil": "low", "spicy": "low"}),
        ("  Less Oil; Less Spicy ", {"oil": "low", "spicy": "low"}),
        ("我喜欢少辣", {"spicy": "low"}),
        ("不辣", {"spicy": "none"}),
        ("特辣", {"spicy": "high"}),
        ("清淡", {"oil": "low", "salt": "low"}),
        ("少盐少糖", {"salt": "low", "sugar": "low"}),
    ],
)
def test_flavor_phrases_normalise_to_an_object(raw, expected):
    value = normalize_value(FLAVOR, raw)
    assert value == expected
    validate_value(FLAVOR, value)


def test_flavor_object_passes_through_with_keys_lower_cased():
    assert normalize_value(FLAVOR, {" Spicy ": "LOW", "Oil": "low"}) == {"spicy": "low", "oil": "low"}


@pytest.mark.parametrize("raw", ["少辣，不要香菜", "少辣多辣", "something nice"])
def test_flavor_text_that_cannot_be_read_fully_is_refused_not_half_kept(raw):
    value = normalize_value(FLAVOR, raw)
    assert isinstance(value, str)
    with pytest.raises(SchemaError) as exc_info:
        validate_value(FLAVOR, value)
    assert_schema_error(exc_info, "invalid", "node.valueJson")
    assert "少辣" in exc_info.value.detail


def test_other_kinds_only_strip_and_nfkc_strings():
    food = DEFAULT_KINDS["food_avoidance"]
    assert normalize_value(food, "  ｃｉｌａｎｔｒｏ ") == "cilantro"
    assert normalize_value(DEFAULT_KINDS["task"], {"status": " open ", "Title": "x"}) == {
        "status": "open",
        "Title": "x",
    }
    assert normalize_value(food, None) is None
    assert normalize_value(food, 3) == 3


@pytest.mark.parametrize(
    "value",
    [None, {}, {"nickname": "boss"}, {"userRole": ""}, "call me boss"],
)
def test_interaction_contract_needs_one_of_its_roles(value):
    with pytest.raises(SchemaError) as exc_info:
        validate_value(DEFAULT_KINDS["interaction_contract"], value)
    assert_schema_error(exc_info, "invalid", "node.valueJson")
    assert "userRole" in exc_info.value.detail or value == {}


def test_interaction_contract_with_a_role_is_valid():
    validate_value(DEFAULT_KINDS["interaction_contract"], {"addressUserAs": "老板"})


@pytest.mark.parametrize("value", [None, "Berlin", {"country": "DE"}])
def test_home_location_needs_city_or_location(value):
    with pytest.raises(SchemaError) as exc_info:
        validate_value(DEFAULT_KINDS["home_location"], value)
    assert_schema_error(exc_info, "invalid", "node.valueJson")
    assert "city" in exc_info.value.detail and "location" in exc_info.value.detail


def test_home_location_with_city_is_valid():
    validate_value(DEFAULT_KINDS["home_location"], {"city": "杭州"})
    validate_value(DEFAULT_KINDS["home_location"], {"location": "near the lake"})


@pytest.mark.parametrize("value", [None, "write tests", {"title": "write tests"}, {"status": None}])
def test_task_needs_a_status(value):
    with pytest.raises(SchemaError) as exc_info:
        validate_value(DEFAULT_KINDS["task"], value, field="operations[0].node.valueJson")
    assert_schema_error(exc_info, "invalid", "operations[0].node.valueJson")
    assert "status" in exc_info.value.detail


def test_task_with_status_is_valid():
    validate_value(DEFAULT_KINDS["task"], {"status": "open", "title": "write tests"})


@pytest.mark.parametrize(
    ("kind", "value"),
    [
        ("food_avoidance", {"item": "cilantro"}),
        ("food_avoidance", ""),
        ("food_avoidance", 3),
        ("recipe", "stir fry"),
        ("recipe", {}),
        ("decision", ["a", "b"]),
        ("decision", "  "),
    ],
)
def test_value_of_the_wrong_shape_is_invalid(kind, value):
    with pytest.raises(SchemaError) as exc_info:
        validate_value(DEFAULT_KINDS[kind], value)
    assert_schema_error(exc_info, "invalid", "node.valueJson")
    assert kind in exc_info.value.detail


@pytest.mark.parametrize(
    ("kind", "value"),
    [
        ("food_avoidance", "cilantro"),
        ("food_avoidance", None),
        ("recipe", {"steps": ["a"]}),
        ("decision", "x"),
        ("decision", {"choice": "postgres"}),
        ("flavor_profile", None),
        ("temporary_state", "tired today"),
    ],
)
def test_value_of_the_right_shape_or_omitted_is_valid(kind, value):
    validate_value(DEFAULT_KINDS[kind], value)


# --------------------------------------------------------------------------- sensitive content


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("my password is hunter2", "password"),
        ("密码是 abc123", "password"),
        ("密码：xxx", "password"),
        ("pwd=Tr0ub4dor&3", "password"),
        ("wifi密码是12345678", "password"),
        ("My PIN is 4821", "password"),
        ("sk-proj-abcDEF1234567890ghijklmnop", "api_key"),
        ("use key sk-abcdefghijklmnopqrstuvwxyz123456", "api_key"),
        ("ghp_1234567890abcdefghijklmnopqrstuvwxyzAB", "api_key"),
        ("github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz", "api_key"),
        ("AWS key AKIAIOSFODNN7EXAMPLE", "api_key"),
        ("slack xoxb-123456789012-abcdefghijkl", "api_key"),
        ("api key 是 a1b2c3d4e5", "api_key"),
        ("token: a1b2c3d4e5f6g7h8i9j0", "api_key"),
        ("Authorization: Bearer abcdef1234567890abcdef1234567890", "access_token"),
        ("-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA", "private_key"),
        ("-----BEGIN OPENSSH PRIVATE KEY-----", "private_key"),
        ("my card is 4111 1111 1111 1111", "card_number"),
        ("5500-0000-0000-0004 exp 12/27", "card_number"),
        ("amex 378282246310005", "card_number"),
        ("信用卡号 6222 0000 0000 0000 123", "card_number"),
        ("身份证 11010519491231002X", "id_number"),
        ("我的身份证号码是110105194912310021", "id_number"),  # context is enough even with a typo
        ("SSN 123-45-6789", "ssn"),
        ("my social security number is 123 45 6789", "ssn"),
        ("护照号 E12345678", "passport_number"),
        ("passport number: G12345678", "passport_number"),
        ("ｍｙ ｐａｓｓｗｏｒｄ ｉｓ ｈｕｎｔｅｒ２", "password"),  # full-width (NFKC)
    ],
)
def test_sensitive_content_is_detected(text, reason):
    assert find_sensitive_content(text) == reason


@pytest.mark.parametrize(
    "text",
    [
        "I like spicy food",
        "记住我不吃香菜",
        "the password manager is 1Password",
        "reset my password please",
        "my password is strong",
        "我忘记密码了怎么办",
        "我的密码是什么",
        "我的手机号是 13800138000",
        "call me at +1 415-555-2671",
        "meeting on 2024-05-01, then 2024-06-01",
        "order 12345678 shipped",
        "token budget 4000",
        "max tokens is 4096",
        "the api key goes in the settings page",
        "use the sk- prefix for keys",
        "sk-learn-tutorial-for-beginners-guide",
        "身份证在抽屉里",
        "timestamp 1700000000000",
        "passport expires 2030",
        "run pwd to print the directory",
        "4111 1111 1111 1112",  # fails Luhn
        "pin the tab to the left",
    ],
)
def test_ordinary_text_is_not_sensitive(text):
    assert find_sensitive_content(text) is None


def test_sensitive_content_checks_every_text_and_skips_none():
    assert find_sensitive_content(None, "", "title", "my password is hunter2") == "password"
    assert find_sensitive_content() is None


def test_luhn_checksum():
    assert luhn_valid("4111111111111111")
    assert luhn_valid("378282246310005")
    assert not luhn_valid("4111111111111112")
    assert not luhn_valid("4111-1111")


def test_chinese_resident_id_checksum():
    assert cn_resident_id_valid("11010519491231002X")
    assert cn_resident_id_valid("11010519491231002x")
    assert not cn_resident_id_valid("110105194912310021")  # wrong check character
    assert not cn_resident_id_valid("110105194913310023")  # month 13
    assert find_sensitive_content("证件 11010519491231002X") == "id_number"
    assert find_sensitive_content("编号 110105194912310021") is None


# --------------------------------------------------------------------------- confidence contract

EVIDENCE = ["记住，我不吃香菜。", "Please remember: I never eat cilantro."]


def test_confidence_levels_keep_downgrades_above_the_omission_floor():
    assert LOW_CONFIDENCE_OMIT_BELOW <= LOW_CONFIDENCE_CAP < 0.5 <= MEDIUM_CONFIDENCE_CAP < 0.8


def test_high_confidence_with_a_verbatim_quote_in_evidence_stays():
    assert apply_confidence_contract(0.95, "我不吃香菜", EVIDENCE) == (0.95, False)
    assert apply_confidence_contract(0.9, "I  never eat\ncilantro", EVIDENCE) == (0.9, False)  # whitespace


def test_high_confidence_with_a_short_quote_drops_to_medium():
    assert apply_confidence_contract(0.9, "不吃香", EVIDENCE) == (MEDIUM_CONFIDENCE_CAP, True)


def test_high_confidence_with_a_quote_not_in_evidence_is_downgraded_to_low():
    assert apply_confidence_contract(0.9, "香菜我不吃", EVIDENCE) == (LOW_CONFIDENCE_CAP, True)
    assert apply_confidence_contract(0.9, "i never eat cilantro", EVIDENCE) == (
        LOW_CONFIDENCE_CAP,
        True,
    )  # case
    assert apply_confidence_contract(0.9, None, EVIDENCE) == (LOW_CONFIDENCE_CAP, True)


def test_medium_confidence_needs_a_non_empty_quote_in_evidence():
    assert apply_confidence_contract(0.6, "香菜", EVIDENCE) == (0.6, False)
    assert apply_confidence_contract(0.6, None, EVIDENCE) == (LOW_CONFIDENCE_CAP, True)
    assert apply_confidence_contract(0.6, "   ", EVIDENCE) == (LOW_CONFIDENCE_CAP, True)
    assert apply_confidence_contract(0.6, "香菜", []) == (LOW_CONFIDENCE_CAP, True)


def test_low_confidence_needs_no_quote():
    assert apply_confidence_contract(0.4, None, []) == (0.4, False)


@pytest.mark.parametrize("confidence", [-0.1, 1.5, float("nan"), True])
def test_confidence_outside_zero_to_one_is_invalid(confidence):
    with pytest.raises(SchemaError) as exc_info:
        apply_confidence_contract(confidence, "我不吃香菜", EVIDENCE)
    assert_schema_error(exc_info, "invalid", "node.confidence")


# --------------------------------------------------------------------------- list-all queries


@pytest.mark.parametrize(
    "text",
    [
        "所有记忆",
        "全部记忆",
        "列出所有记忆",
        "请列出我的全部记忆。",
        "把所有记忆列出来",
        "all memories",
        "All Memories",
        "list everything",
        "show all my memories",
        "Show me all of your memories!",
        "every memory",
        "everything you remember about me",
    ],
)
def test_list_all_queries_are_detected(text):
    assert is_list_all_query(text)


@pytest.mark.parametrize(
    "text",
    [
        "all the spicy food",
        "所有川菜",
        "所有记忆里关于川菜的",
        "all my spicy memories",
        "list all spicy dishes",
        "what do I like to eat",
        "",
        None,
    ],
)
def test_topic_queries_are_not_list_all(text):
    assert not is_list_all_query(text)


# --------------------------------------------------------------------------- scope policy


def test_global_scope_is_forbidden_for_agents():
    with pytest.raises(SchemaError) as exc_info:
        scope_for("hard_constraint", "global", allowed=SCOPES)
    assert_schema_error(exc_info, "forbidden", "node.scope")


def test_scope_outside_the_key_write_scopes_is_forbidden():
    with pytest.raises(SchemaError) as exc_info:
        scope_for("project_context", "workspace", allowed=("session",))
    assert_schema_error(exc_info, "forbidden", "node.scope")


def test_unknown_scope_is_invalid():
    with pytest.raises(SchemaError) as exc_info:
        scope_for("project_context", "team")
    assert_schema_error(exc_info, "invalid", "node.scope")


def test_user_scope_with_explicit_intent_is_kept():
    assert scope_for("food_avoidance", "user", intent=True) == "user"
    assert scope_for("skill", "user", intent=True) == "user"


@pytest.mark.parametrize("kind", ["skill", "food_avoidance"])
def test_user_scope_without_intent_is_downgraded_to_session(kind):
    assert scope_for(kind, "user", intent=False) == "session"


def test_intent_kind_in_workspace_without_intent_is_downgraded_to_session():
    assert scope_for("food_avoidance", "workspace", intent=False) == "session"


def test_workspace_scope_without_intent_is_kept_for_project_kinds():
    assert scope_for("project_context", "workspace", intent=False) == "workspace"


def test_session_scope_never_needs_intent():
    assert scope_for("food_avoidance", "session", intent=False) == "session"


def test_missing_intent_is_forbidden_when_the_key_cannot_write_session():
    with pytest.raises(SchemaError) as exc_info:
        scope_for("food_avoidance", "user", intent=False, allowed=("user",))
    assert_schema_error(exc_info, "forbidden", "node.scope")
    assert "explicitUserIntent" in exc_info.value.detail


def test_temporary_state_in_user_scope_needs_expires_at():
    with pytest.raises(SchemaError) as exc_info:
        scope_for("temporary_state", "user", intent=True, expires=False)
    assert_schema_error(exc_info, "invalid", "node.expiresAt")
    assert "expiresAt" in exc_info.value.detail
    assert scope_for("temporary_state", "user", intent=True, expires=True) == "user"
    assert scope_for("temporary_state", "session", intent=False, expires=False) == "session"


# --------------------------------------------------------------------------- stop words
