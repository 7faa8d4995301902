"""Agents written against the plain OpenAI client, trained through the gateway."""
