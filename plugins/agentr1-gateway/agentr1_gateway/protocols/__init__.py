"""The APIs the gateway speaks, one module each, over a shared core (``core``: one request is one ``Turn``, rendered
and tokenised once whatever protocol carried it; the model's answer is read once into a ``Reply``).

* ``openai_chat``: OpenAI chat completions, plain and streamed.
* ``anthropic_messages``: Anthropic Messages, plain and streamed, and its token count.
* ``openai_responses``: OpenAI Responses, plain and streamed, with ``previous_response_id``.
"""
