"""``WebShopEnv``: WebShop's text-mode shopping task as an ``AgentEnv``, scored with the benchmark's reward.

Each dataset row carries one goal (``row["goal"]``: asin, instruction_text, attributes, goal_options, price_upper,
query, name, product_category). The model sees a flat context every step: the instruction, its last ``history``
actions, the current page and the actions available there. ``click[buy now]`` ends the episode with the WebShop
reward (``info["reward_breakdown"]``; success = reward 1.0). An action that cannot be parsed or is not available is
answered with an error observation and the episode goes on; after ``max_steps`` actions without a purchase the
episode is truncated with reward 0. The env pays the reward itself (``reward: null`` in a config), so the purchase
reward is the episode's reward in training, validation and the episode logs. ``expert_action`` scripts the shortest
way to the goal (warm-start data).
"""

from __future__ import annotations

from typing import Any

from thefuzz import fuzz

from agentr1_core.envs import AgentEnv
from agentr1_core.mdp import Action, Observation, StepResult
from agentr1_env_webshop.catalog import Catalog, load_catalog
from agentr1_env_webshop.nouns import BACKENDS
from agentr1_env_webshop.pages import Shop
from agentr1_env_webshop.reward import webshop_reward

SYSTEM_PROMPT = (
    "You are shopping on a website for the product described in the instruction. Each turn, reply with exactly one "
    "action from the available actions: search[your query] on the search page, or click[label] with a label "
    "shown on the page. Choose the options the instruction asks for, then click[buy now].")


class WebShopEnv(AgentEnv):
    def __init__(self, products: str = "", prices: str = "", max_steps: int = 15, history: int = 3,
                 noun_tagger: str = "perceptron", top_k: int = 50, per_page: int = 10, max_page_chars: int = 3000,
                 show_actions: bool = True, system_prompt: str = SYSTEM_PROMPT,
                 catalog: Catalog | None = None) -> None:
        if catalog is None and not products:
            raise ValueError("the webshop env needs products=PATH (a processed-products JSONL) "
                             "and usually prices=PATH (a JSON {asin: price})")
        if noun_tagger not in BACKENDS:
            raise ValueError(f"unknown noun_tagger {noun_tagger!r}; valid: {', '.join(BACKENDS)}")
        if max_steps < 1:
            raise ValueError("max_steps must be at least 1")
        self.catalog = catalog or load_catalog(products, prices)
        self.max_steps, self.history, self.noun_tagger = max_steps, history, noun_tagger
        self.top_k, self.per_page, self.max_page_chars = top_k, per_page, max_page_chars
        self.show_actions, self.system_prompt = show_actions, system_prompt
        self.goal: dict[str, Any] = {}
        self.shop = Shop(self.catalog, top_k, per_page)
        self.actions: list[str] = []
        self.steps = 0
        self._expert_query = ""

    # ---- episode ----------------------------------------------------------------------------------------------
    async def reset(self, row: dict[str, Any]) -> Observation:
        goal = row.get("goal")
        if not isinstance(goal, dict) or "asin" not in goal:
            raise ValueError("a webshop row needs a 'goal' dict (use the 'webshop' dataset loader)")
        if goal["asin"] not in self.catalog.products:
            raise ValueError(f"goal product {goal['asin']} is not in the catalogue")
        self.goal = goal
        self.shop = Shop(self.catalog, self.top_k, self.per_page)
        self.actions, self.steps = [], 0
        self._expert_query = self._pick_expert_query()
        return self.observation()

    async def step(self, action: Action) -> StepResult:
        self.steps += 1
        text = action.text.strip()
        outcome = self.shop.act(text)
        self.actions.append(text if outcome.valid else f"{text[:80]} (invalid)")
        info: dict[str, Any] = {"valid_action": outcome.valid, "page": self.shop.page, "steps": self.steps}
        if outcome.bought:
            product = self.catalog.products[self.shop.asin]
            result = webshop_reward(product, self.goal, self.catalog.prices[self.shop.asin], self.shop.options,
                                    self.noun_tagger)
            info.update(reward_breakdown=result.as_dict(), webshop_reward=result.reward,
                        success=result.reward == 1.0, bought=self.shop.asin)
            feedback = f"You bought {product['Title'][:100]}. Reward: {result.reward:.3f}"
            return StepResult(observation=None, reward=result.reward, done=True,
                              feedback=feedback, info=info)
        feedback = "" if outcome.valid else f"Invalid action: {outcome.error}"
        truncated = self.steps >= self.max_steps
        if truncated:
            info.update(webshop_reward=0.0, success=False)
        return StepResult(observation=self.observation(feedback), reward=0.0, truncated=truncated,
                          feedback=feedback, info=info)

    # ---- context ----------------------------------------------------------------------------------------------
    def observation(self, error: str = "") -> Observation:
        page = self.shop.render(self.goal.get("instruction_text", ""))
        if len(page) > self.max_page_chars:
            page = page[:self.max_page_chars] + " ..."
        recent = self.actions[-self.history:] if self.history > 0 else []
        parts = [f"Instruction: {self.goal.get('instruction_text', '')}"]
        parts.append("Last actions: " + (" | ".join(recent) if recent else "none"))
        if error:
            parts.append(error)
        parts.append(f"Observation:\n{page}")
        if self.show_actions:
            parts.append("Available actions:\n" + "\n".join(self.shop.available_actions()))
        messages = [{"role": "user", "content": "\n\n".join(parts)}]
        if self.system_prompt:
            messages.insert(0, {"role": "system", "content": self.system_prompt})
        return Observation(messages=messages, anchor=self.shop.anchor())

    # ---- scripted expert --------------------------------------------------------------------------------------
    def _pick_expert_query(self) -> str:
        """The instruction when the search finds the goal product with it, else the product's title."""
        instruction = self.goal.get("instruction_text", "")
        if self.goal["asin"] in self.catalog.search(instruction, self.top_k):
            return instruction.lower()
        return self.catalog.products[self.goal["asin"]]["Title"].lower()

    def _wanted_options(self) -> list[tuple[str, str]]:
        """(option type, value) pairs of the goal product that the goal asks for."""
        product_options = self.catalog.products[self.goal["asin"]].get("options") or {}
        goal_options = self.goal.get("goal_options") or {}
        if isinstance(goal_options, dict):
            return [(k, v) for k, v in goal_options.items() if v in product_options.get(k, [])]
        wanted = []
        for g in goal_options:  # human goals: values only; find the closest product option value
            best = max(((fuzz.token_set_ratio(v, g), k, v) for k, vs in product_options.items() for v in vs),
                       default=None)
            if best is not None and best[0] > 85:
                wanted.append((best[1], best[2]))
        return wanted

    def expert_action(self) -> str | None:
        if not self.goal:
            return None
        shop, target = self.shop, self.goal["asin"]
        if shop.page == "search":
            return f"search[{self._expert_query}]"
        if shop.page == "results":
            if target in shop.page_results():
                return f"click[{target.lower()}]"
            if target in shop.results:
                return "click[next >]" if shop.results.index(target) >= shop.page_num * shop.per_page else "click[< prev]"
            self._expert_query = self.catalog.products[target]["Title"].lower()
            return "click[back to search]"
        if shop.page == "sub" or shop.asin != target:
            return "click[< prev]"
        for kind, value in self._wanted_options():
            if shop.options.get(kind) != value and shop.option_labels().get(value.lower()) == (kind, value):
                return f"click[{value.lower()}]"
        return "click[buy now]"
