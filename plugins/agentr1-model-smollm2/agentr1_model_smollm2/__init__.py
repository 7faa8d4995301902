"""SmolLM2-135M-Instruct as one Q4_1 GGUF file, the model of agentr1's default run (``model.path:
smollm2-135m-instruct``). ``GGUF_PATH`` is the file; agentr1-core dequantises it on first use."""

from pathlib import Path

GGUF_PATH = Path(__file__).parent / "SmolLM2-135M-Instruct.Q4_1.gguf"
