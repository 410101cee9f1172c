"""Answer a prompt with a policy `scalerl export` wrote, using transformers alone (nothing from scalerl).

    python examples/generate_from_export.py /tmp/exp "4-4-3="
"""
import sys

from transformers import AutoModelForCausalLM, AutoTokenizer

folder, prompt = sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "4-4-3="
tokenizer, model = AutoTokenizer.from_pretrained(folder), AutoModelForCausalLM.from_pretrained(folder)
if tokenizer.chat_template:  # a chat model is prompted as scalerl trained it: chat template, then "<think>\n"
    system = "Think step by step inside <think> and </think>, then write the final answer after </think>."
    messages = [{"role": "system", "content": system}, {"role": "user", "content": prompt}]
    prompt = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True) + "<think>\n"
inputs = tokenizer(prompt, return_tensors="pt", add_special_tokens=not tokenizer.chat_template)
output = model.generate(**inputs)  # samples as training did: generation_config.json (temperature 1)
print(prompt + tokenizer.decode(output[0, inputs["input_ids"].shape[1]:], skip_special_tokens=True))
