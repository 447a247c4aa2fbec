"""Query intent: whether a query text asks for every memory ("所有记忆", "list everything") or a topic.
"""

from __future__ import annotations

import re
import unicodedata

_LIST_ALL_CHINESE = re.compile(
    r"(?:请|麻烦)?(?:你)?(?:帮我)?(?:把)?(?:列出|显示|展示|查看|看看|给我看|告诉我|导出|打印)?(?:一下)?"
    r"(?:你记得的|你记住的|关于我的|我的|你的)?(?:所有|全部|一切)的?(?:记忆|回忆|memory|memories)"
    r"(?:内容|列表)?(?:都)?(?:列出来|显示出来|给我看)?(?:吧|呢|吗)?"
    r"|(?:列出|显示|展示|查看|导出)(?:一下)?(?:我的|你的)?记忆(?:列表)?"
)
_LIST_ALL_ENGLISH = re.compile(
    r"(?:please )?(?:(?:list|show|give|tell|display|dump|export|print|what are) )?(?:me )?"
    r"(?:all|every) (?:of )?(?:(?:the|my|your|our|stored|saved) )*(?:memory|memories)"
    r"(?: (?:you (?:have|remember|stored|saved|keep)|about me|of me|stored|saved))?(?: please)?"
    r"|(?:please )?(?:list|show|give|tell|display|dump|export|print) (?:me )?(?:everything|all)"
    r"(?: (?:you (?:have|remember|know|stored|saved)|about me|stored|saved))?(?: please)?"
    r"|(?:tell me |what is |what's )?everything you (?:remember|know|have stored|stored|saved)(?: about me)?"
    r"|(?:list|show|dump|export) (?:my |your |the )?memories"
)


def is_list_all_query(text: str | None) -> bool:
    """Return True when a query asks for every memory ("所有记忆", "list everything"), not a topic."""
    if not text:
        return False
    normalized = " ".join(unicodedata.normalize("NFKC", text).lower().split())
    normalized = normalized.strip(" .!?。,~")
    return bool(
        _LIST_ALL_ENGLISH.fullmatch(normalized) or _LIST_ALL_CHINESE.fullmatch(normalized.replace(" ", ""))
    )
