"""One complete agent turn against Ekko Memory (docs/agent-loop.md): capture → context → tool calls → capture.

    python clients/python/examples/agent_turn.py --url http://127.0.0.1:8000 \
        --key "$(cat .ekko/demo-api-key)" --user demo "I'm allergic to peanuts. What should I cook tonight?"

`plan_tool_calls` stands in for the model so the example runs without one; docs/agent-loop.md shows the
same turn with an OpenAI-compatible chat model that is handed `client.tools()`.
"""

from __future__ import annotations

import argparse
import json
import re
import uuid
from typing import Any

from ekko_client import EkkoClient, errors

ALLERGY = re.compile(
    r"(?:allergic to|never eat|don't eat|do not eat|avoid)\s+([a-z][a-z -]{1,30}?)(?:[.,!?]|$)", re.IGNORECASE
)


def plan_tool_calls(user_text: str, user_id: str) -> list[dict[str, Any]]:
    """What a model would ask for: remember a stated food avoidance, look up what is known about food."""
    calls: list[dict[str, Any]] = []
    if stated := ALLERGY.search(user_text):
        food = stated.group(1).strip().lower()
        calls.append(
            {
                "name": "memory_write",
                "arguments": {
                    "operations": [
                        {
                            "operation": "create",
                            "reason": "the user said so in this turn",
                            "node": {
                                "kind": "food_avoidance",
                                "itemKey": food,
                                "scope": "user",
                                "userId": user_id,
                                "title": f"Avoids {food}",
                                "content": f"{user_id} avoids {food}",
                            },
                        }
                    ],
                    "explicitUserIntent": True,
                },
            }
        )
    calls.append(
        {"name": "memory_search", "arguments": {"queryText": user_text, "userId": user_id, "limit": 5}}
    )
    return calls


def run_tool(client: EkkoClient, name: str, arguments: dict[str, Any], evidence: list[str]) -> dict[str, Any]:
    """Execute one tool call; an API error goes back to the model as the tool's answer, never as a crash."""
    if name == "memory_write":
        arguments = {**arguments, "sourceMessageIds": evidence}
    method = {
        "memory_search": client.memory_search,
        "memory_get": client.memory_get,
        "memory_write": client.memory_write,
        "memory_forget": client.memory_forget,
        "memory_context": client.context,
    }[name]
    try:
        return method(**arguments).model_dump(mode="json", by_alias=True)
    except errors.EkkoError as error:
        return error.body


def agent_turn(client: EkkoClient, *, session_id: str, user_id: str, user_text: str) -> str:
    user_message = f"u-{uuid.uuid4()}"
    client.messages_capture(
        session_id=session_id,
        user_id=user_id,
        messages=[{"id": user_message, "role": "user", "content": user_text}],
    )
    print(f"1. captured the user's message {user_message}")

    pack = client.context(session_id=session_id, user_id=user_id, query_text=user_text)
    print(f"2. context: {pack.diagnostics.get('usedTokens')} tokens, memories {pack.used_memory_ids}")
    print("   " + pack.prompt.replace("\n", "\n   "))

    known: list[str] = []
    for call in plan_tool_calls(user_text, user_id):
        answer = run_tool(client, call["name"], call["arguments"], [user_message])
        print(f"3. {call['name']} → {json.dumps(answer, ensure_ascii=False)[:300]}")
        if call["name"] == "memory_search":
            known = [node["title"] for node in answer.get("exact", []) + answer.get("relevant", [])]

    reply = ("Noted. " if known else "") + (
        f"I'll keep in mind: {'; '.join(known)}." if known else "Tell me what you like and I'll remember it."
    )
    client.messages_capture(
        session_id=session_id,
        user_id=user_id,
        messages=[{"id": f"a-{uuid.uuid4()}", "role": "assistant", "content": reply}],
    )
    print(f"4. captured the reply: {reply}")
    return reply


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--key", required=True, help="an API key (make run prints the demo key)")
    parser.add_argument("--user", default="demo", help="the tenant member the turn is for")
    parser.add_argument("--session", default=f"example-{uuid.uuid4().hex[:8]}")
    parser.add_argument("text", nargs="?", default="I'm allergic to peanuts. What should I cook tonight?")
    args = parser.parse_args()
    with EkkoClient(args.url, args.key) as client:
        agent_turn(client, session_id=args.session, user_id=args.user, user_text=args.text)


if __name__ == "__main__":
    main()
