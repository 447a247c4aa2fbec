"""The agent REST API of shared/API.md: thin views over memory.services.nodes, selectors and retrieval."""
