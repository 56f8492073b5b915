"""The tiny model: a random-init Qwen2 model with a byte-level BPE tokenizer trained here on templated K&K text, so
the whole pipeline runs offline in seconds.
"""

from __future__ import annotations

import random
from pathlib import Path

import torch
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import GenerationConfig, PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

PAD_TOKEN = "<|endoftext|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
# Answer-format tags: plain added tokens (not special), so they survive skip_special_tokens decoding.
TAG_TOKENS = ("<think>", "</think>", "<answer>", "</answer>")

# ChatML as Qwen2.5 writes it, without its default system prompt; contents verbatim (continue_final_message cuts there)
CHATML_TEMPLATE = (
    "{%- for message in messages -%}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)

NAMES = (
    "Zoey", "Oliver", "Ethan", "Aurora", "Michael", "Avery", "Abigail", "Liam", "Sophia", "Mason", "Emma",
    "Noah", "Olivia", "Lucas", "Mia", "Jack", "Harper", "Elijah", "Evelyn", "James", "Charlotte",
    "Benjamin", "Amelia", "Henry", "Ella", "Alexander", "Scarlett", "Sebastian", "Grace", "Daniel", "Chloe",
    "Matthew", "Victoria", "Samuel", "Riley", "Joseph", "Aria", "David", "Lily", "Jacob", "Zoe", "Logan",
    "Penelope", "Owen", "Layla", "Luke", "Nora", "Gabriel", "Hannah", "Isaac", "Lillian", "Leo", "Addison",
    "Jackson", "Ellie", "Aiden", "Stella", "Carter", "Natalie", "Wyatt", "Leah", "Jayden", "Hazel", "John",
    "Violet", "Dylan", "Aubrey", "Grayson", "Savannah", "Levi", "Brooklyn", "Isabella", "William", "Sofia",
    "Ava", "Emily", "Madison", "Elizabeth", "Anthony", "Joshua", "Andrew", "Christopher", "Ryan", "Nathan",
    "Caleb", "Hunter", "Christian", "Isaiah", "Thomas", "Aaron", "Lincoln", "Charles", "Eli", "Landon",
    "Connor", "Josiah", "Jonathan", "Cameron", "Jeremiah", "Mateo", "Adrian", "Hudson", "Robert",
    "Nicholas", "Brayden", "Nolan", "Easton", "Jordan", "Colton", "Evan", "Angel", "Asher", "Dominic",
    "Austin", "Ian", "Adam", "Elias", "Jaxson", "Greyson", "Jose", "Ezra", "Carson", "Justin", "Kevin",
    "Zachary", "Julian", "Bella", "Claire", "Skylar", "Lucy", "Paisley", "Everly", "Anna", "Caroline",
    "Genesis", "Kennedy", "Samantha", "Maya", "Willow", "Kinsley", "Naomi", "Aaliyah", "Elena", "Sarah",
    "Ariana", "Allison", "Gabriella", "Alice", "Madelyn", "Cora", "Ruby", "Eva", "Serenity", "Autumn",
    "Adeline", "Hailey", "Gianna", "Valentina", "Isla", "Eliana", "Quinn", "Nevaeh", "Ivy", "Sadie",
    "Piper", "Lydia", "Alexa", "Josephine", "Emery", "Julia", "Delilah", "Arianna", "Vivian", "Kaylee",
)
SPEECH = (
    "said", "stated", "remarked", "claimed", "mentioned", "noted", "commented", "exclaimed", "asserted",
    "told you that", "said that", "explained", "insisted", "declared", "expressed that", "was heard saying",
    "remarked that", "commented that", "made a statement", "stated that",
)
# The wording of conf/prompt/*.yaml, so that the prompts the pipeline sends tokenize compactly.
SYSTEM_PROMPTS = (
    "You are a helpful assistant. The assistant first thinks about the reasoning process in the mind "
    "and then provides the user with the answer. The reasoning process and answer are enclosed within "
    "<think> </think> and <answer> </answer> tags, respectively, i.e., <think> reasoning process here "
    "</think> <answer> answer here </answer>. Now the user asks you to solve a logical reasoning problem. "
    "After thinking, when you finally reach a conclusion, clearly state the identity of each character "
    "within <answer> </answer> tags, one per line, i.e., <answer> (1) Zoey is a knight (2) ... </answer>.",
    "You are a helpful assistant. Solve the logical reasoning problem and reply with only the identity "
    "of each character inside <answer> </answer> tags, one per line, i.e., <answer> (1) Zoey is a knight "
    "(2) ... </answer>.",
)


def _statement(rng: random.Random, people: list[str]) -> str:
    """One claim of the kinds K&K puzzles use (truth value irrelevant: this is tokenizer text)."""
    a, b = rng.choice(people), rng.choice(people)
    role, other = rng.choice([("knight", "knave"), ("knave", "knight")])
    forms = (
        f"{a} is a {role}", f"{a} is not a {other}", f"{a} is a {role} and {b} is a {other}",
        f"{a} is a {role} or {b} is a {role}", f"If {a} is a {role} then {b} is a {other}",
        f"{a} is a {role} if and only if {b} is a {other}", f"Both {a} and {b} are {role}s",
        f"Exactly one of {a} and {b} is a {role}", f"{a} and {b} are not the same",
        f"It is not the case that {a} is a {role}", f"At least one of {a} and {b} is a {other}",
        f"{a} is a {role} if {b} is a {other}", f"Only a {other} would say that {b} is a {role}",
    )
    return rng.choice(forms)


def _puzzle_text(rng: random.Random) -> str:
    """A quiz, its chain of thought and its answer in the published K&K wording, as a chat or plain text."""
    people = rng.sample(NAMES, rng.randint(2, 8))
    roles = {name: rng.choice(("knight", "knave")) for name in people}
    claims = " ".join(f'{p} {rng.choice(SPEECH)}, "{_statement(rng, people)}."' for p in people)
    quiz = (
        "A very special island is inhabited only by knights and knaves. Knights always tell the truth, "
        f"and knaves always lie. You meet {len(people)} inhabitants: {', '.join(people)}. {claims} "
        "So who is a knight and who is a knave?"
    )
    steps = " ".join(
        f"Assume {p} is a {roles[p]}. No contradiction is found in their claim that "
        f"{_statement(rng, people)}."
        if rng.random() < 0.5
        else f"{p} cannot be a {'knave' if roles[p] == 'knight' else 'knight'}, because this would "
        f"contradict the claim of {rng.choice(people)} that {_statement(rng, people)}."
        for p in people
    )
    answer = "\n".join(f"({i}) {p} is a {roles[p]}" for i, p in enumerate(people, 1))
    reply = (
        f"<think>\nLet's think step by step, by considering whether each person is lying. {steps}\n</think>\n"
        f"<answer>\n{answer}\n</answer>"
    )
    system = rng.choice(SYSTEM_PROMPTS)
    if rng.random() < 0.2:  # the plain-text prompt of base models (model.chat=false)
        return f"{system}\n\nUser: {quiz}\nAssistant: {reply}{PAD_TOKEN}"
    return (
        f"{IM_START}system\n{system}{IM_END}\n{IM_START}user\n{quiz}{IM_END}\n"
        f"{IM_START}assistant\n{reply}{IM_END}\n"
    )


def kk_corpus(seed: int, size: int) -> list[str]:
    """`size` deterministic K&K-style training texts for the tokenizer."""
    rng = random.Random(seed)
    return [_puzzle_text(rng) for _ in range(size)]


def train_tokenizer(corpus: list[str], vocab_size: int, max_length: int) -> PreTrainedTokenizerFast:
    """A byte-level BPE tokenizer trained on `corpus` (`vocab_size` a cap), wrapped for transformers."""
    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    backend.post_processor = processors.ByteLevel(trim_offsets=False)
    # Registered before training so that the trainer sees them as atoms and spends no merges on them.
    backend.add_special_tokens([PAD_TOKEN, IM_START, IM_END])
    backend.add_tokens([AddedToken(tag, special=False, normalized=False) for tag in TAG_TOKENS])
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[PAD_TOKEN, IM_START, IM_END],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    backend.train_from_iterator(corpus, trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        eos_token=IM_END,
        pad_token=PAD_TOKEN,
        chat_template=CHATML_TEMPLATE,
        model_max_length=max_length,
    )


def random_qwen2(tiny: dict, tokenizer: PreTrainedTokenizerFast) -> Qwen2ForCausalLM:
    """A randomly initialised Qwen2 model of the `tiny` sizes, seeded without touching the global RNG."""
    pad_id = tokenizer.convert_tokens_to_ids(PAD_TOKEN)
    im_end_id = tokenizer.convert_tokens_to_ids(IM_END)
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=tiny["hidden_size"],
        num_hidden_layers=tiny["num_hidden_layers"],
        num_attention_heads=tiny["num_attention_heads"],
        num_key_value_heads=tiny["num_key_value_heads"],
        intermediate_size=tiny["intermediate_size"],
        max_position_embeddings=tiny["max_position_embeddings"],
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=im_end_id,
        pad_token_id=pad_id,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(tiny["seed"])
        model = Qwen2ForCausalLM(config).to(torch.float32)
    # Like Qwen: a chat turn ends at <|im_end|>, a plain-text document at <|endoftext|>.
    model.generation_config = GenerationConfig(eos_token_id=[im_end_id, pad_id], pad_token_id=pad_id)
    return model


def build_tiny_checkpoint(out_dir: Path, tiny: dict) -> dict:
    """Train the tokenizer, init the model and save both into `out_dir`; returns facts for the cache."""
    corpus = kk_corpus(tiny["seed"], tiny["corpus_size"])
    tokenizer = train_tokenizer(corpus, tiny["vocab_size"], tiny["max_position_embeddings"])
    model = random_qwen2(tiny, tokenizer)
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    return {"vocab_size": len(tokenizer), "parameters": sum(p.numel() for p in model.parameters())}
