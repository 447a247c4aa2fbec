"""Long-term memory: evidence messages, summary chains, memory nodes (cards) and their audit trail."""
