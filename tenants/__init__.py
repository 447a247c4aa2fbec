"""Tenants, memberships, workspaces and API keys, and the tenant context every query runs in."""
