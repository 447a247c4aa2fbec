"""Work that follows a commit (embeddings, extraction); hooks called from memory.services via on_commit."""

from __future__ import annotations

import logging

logger = logging.getLogger(__name__)


def after_nodes_written(tenant_id: int, node_ids: list) -> None:
    """Queue embeddings for new or changed nodes."""


def after_messages_captured(tenant_id: int, workspace_id: int, session_id: str, message_pks: list[int]) -> None:
    """Queue embeddings for new main-channel messages and, past the thresholds, an extraction run."""
