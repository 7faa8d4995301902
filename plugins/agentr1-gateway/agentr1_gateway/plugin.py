"""Registers the ``openai_agent`` and ``cli_agent`` flows and the named configs of ``agentr1_gateway/configs/`` with agentr1."""

from agentr1_core import hookimpl
from agentr1_core.named_configs import package_configs
from agentr1_core.specs import AgentFlowSpec


@hookimpl
def agentr1_agent_flows():
    return [AgentFlowSpec("openai_agent", "agentr1_gateway.flow:OpenAIAgentFlow",
                          "run an existing OpenAI-client agent function; each chat-completion call is one step",
                          code_params=("agent",)),  # the agent's code: shown and checked for a run folder's config
            AgentFlowSpec("cli_agent", "agentr1_gateway.cli_flow:CLIAgentFlow",
                          "run an agent program (a CLI harness) per episode against the endpoint; each model call is "
                          "one step",
                          command_params=("command", "verifier", "env"))]  # programs it runs: checked like code


@hookimpl
def agentr1_configs():
    return package_configs("agentr1_gateway")  # e.g. agentr1-core run calculator-openai
