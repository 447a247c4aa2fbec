"""The agent REST API of shared/API.md: thin views over memory.services, selectors and retrieval."""
