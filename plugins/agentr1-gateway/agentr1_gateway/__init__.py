"""agentr1-gateway: an OpenAI-compatible endpoint per episode, so an agent written against the OpenAI client trains
unchanged (the ``openai_agent`` flow); every chat-completion call is one step of the episode."""
