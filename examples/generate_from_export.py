"""Answer a prompt with a policy `scalerl export` wrote, using transformers alone (nothing from scalerl).

    python examples/generate_from_export.py /tmp/exp "4-4-3="
"""
import json
import sys
from pathlib import Path

from transformers import AutoModelForCausalLM, AutoTokenizer

folder, prompt = sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "4-4-3="
tokenizer, model = AutoTokenizer.from_pretrained(folder), AutoModelForCausalLM.from_pretrained(folder)
# the run's prompt settings (model.think, model.system in scalerl_export.json), as the run used them
info = Path(folder, "scalerl_export.json")
run_model = json.loads(info.read_text())["config"]["model"] if info.is_file() else {}
if tokenizer.chat_template:  # a chat model is prompted as scalerl trained it: chat template (then "<think>\n")
    think, system = run_model.get("think", True), run_model.get("system")
    if think:
        instruction = "Think step by step inside <think> and </think>, then write the final answer after </think>."
        system = f"{system}\n{instruction}" if system else instruction
    messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": prompt}]
    prompt = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    prompt += "<think>\n" if think else ""
inputs = tokenizer(prompt, return_tensors="pt", add_special_tokens=not tokenizer.chat_template)
output = model.generate(**inputs)  # samples as training did: generation_config.json (temperature 1)
print(prompt + tokenizer.decode(output[0, inputs["input_ids"].shape[1]:], skip_special_tokens=True))
