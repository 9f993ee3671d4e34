"""The fixed benchmark workloads W1 (chat) and W2 (a shared ~600-token system prompt)."""

from __future__ import annotations

import json
import math
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SUBJECTS = [
    "the water cycle",
    "black holes",
    "the French Revolution",
    "photosynthesis",
    "machine learning",
    "the Roman Empire",
    "volcanoes",
    "the human heart",
    "climate change",
    "the printing press",
    "honey bees",
    "the internet",
    "earthquakes",
    "the Moon landing",
    "vaccines",
    "electric cars",
]
FORMS = [
    "Explain {} to a ten-year-old.",
    "Write a short paragraph about {}.",
    "What are three surprising facts about {}?",
    "Summarize the history of {} in a few sentences.",
]

SYSTEM_PROMPT_W2 = (
    "You are the customer support assistant of Northwind Outfitters, a company that sells "
    "outdoor gear online and in twelve stores. Follow these rules in every answer. "
    "1. Be polite, brief and concrete; never invent order numbers, prices or dates. "
    "2. Orders ship within two business days; express shipping arrives in one to two days, "
    "standard shipping in three to six days, and international shipping in seven to fifteen "
    "days. Shipping is free for orders above 75 dollars inside the country. "
    "3. Returns are accepted within 60 days of delivery for unused items with their tags; "
    "used items can be returned within 30 days only if they are defective. Refunds go back to "
    "the original payment method within ten business days after the return is received. "
    "4. Exchanges for a different size or colour are free once per order. "
    "5. Tents, sleeping bags and backpacks carry a two-year warranty against manufacturing "
    "defects; footwear carries one year; clothing carries six months. Warranty claims need a "
    "photo of the defect and the order number. "
    "6. Gift cards never expire and cannot be exchanged for cash. "
    "7. Members of the Trailhead Club earn one point per dollar; 500 points give a 25 dollar "
    "voucher. Points expire after two years without a purchase. "
    "8. Store hours are ten to eight on weekdays and ten to six on weekends; stores are closed "
    "on national holidays. "
    "9. We rent tents, kayaks and snowshoes at the Denver, Portland and Burlington stores; "
    "rentals must be booked at least three days ahead and returned clean and dry. "
    "10. Product advice: recommend gear that fits the customer's trip, season and budget, and "
    "mention safety equipment such as headlamps, first aid kits and water filters when a trip "
    "goes into the backcountry. "
    "11. If a customer is angry, acknowledge the problem first, then offer the concrete next "
    "step. Escalate to a human agent when a customer asks for one, when an order is lost for "
    "more than twenty days, or when a safety issue with a product is reported. "
    "12. Never share another customer's information and never ask for a full card number. "
    "13. Sign every answer with 'Northwind Support'. "
    "14. When a customer asks about an item we do not sell, say so plainly and suggest the "
    "closest product we carry, without naming other shops. "
    "Our best sellers this season are the Ridgeback two-person tent, the Alpine 30 litre day "
    "pack, the Cascade waterproof jacket, the Summit down sleeping bag rated to minus ten "
    "degrees, and the Trailrunner shoes. Prices change often, so direct customers to the "
    "website for current prices and stock. Answer the customer's question now."
)
QUESTIONS_W2 = [
    "Can I return boots I wore once?",
    "How long does express shipping take?",
    "Is shipping free for a 60 dollar order?",
    "My tent pole broke after a year. What now?",
    "Do gift cards expire?",
    "How many points do I need for a voucher?",
    "Are you open on Sunday evening?",
    "Can I rent a kayak in Portland tomorrow?",
    "What should I pack for a winter hike?",
    "I want to talk to a human.",
    "How do I exchange a jacket for a bigger size?",
    "When will I get my refund?",
    "Can I ship to Canada?",
    "Is the Summit bag warm enough for snow camping?",
    "Which day pack do you recommend for a day trip?",
    "My order is 25 days late!",
    "Do points expire?",
    "What is the warranty on clothing?",
    "Can I return a used sleeping bag that tore?",
    "Where can I rent snowshoes?",
    "What are your weekday hours?",
    "Can I pay with two gift cards?",
    "I found a sharp edge on my stove. Is it safe?",
    "Do you price match?",
    "How do I join the Trailhead Club?",
    "Can I exchange twice?",
    "What do I need for a warranty claim?",
    "Do you sell water filters?",
    "Is the Cascade jacket waterproof?",
    "How early must I book a rental?",
    "Can I return something after 70 days?",
    "What shoes are good for trail running?",
]


@dataclass(frozen=True)
class Workload:
    name: str
    conversations: list[list[dict[str, Any]]]
    max_tokens: int
    ignore_eos: bool
    # One output budget per conversation, when they differ (the mixed workload).
    max_tokens_each: tuple[int, ...] | None = None


def w1(num_requests: int = 64, max_tokens: int = 128, variant: int = 0) -> Workload:
    """64 distinct chat requests × 128 new tokens, EOS ignored so every request is equal.

    A `variant` above 0 opens every question with "Request <variant>." so that a repeated
    round finds none of its prompts in a server's prefix cache, as the first one did."""
    prompts = [form.format(subject) for form in FORMS for subject in SUBJECTS]
    if variant:
        prompts = [f"Request {variant}. {p}" for p in prompts]
    conversations = [[{"role": "user", "content": p}] for p in prompts[:num_requests]]
    return Workload("W1", conversations, max_tokens, ignore_eos=True)


def w2(num_requests: int = 64, max_tokens: int = 32) -> Workload:
    """64 requests sharing one ~600-token system prompt, distinct questions, 32 new tokens."""
    questions = [*QUESTIONS_W2, *(f"{q} Please answer briefly." for q in QUESTIONS_W2)]
    conversations = [
        [{"role": "system", "content": SYSTEM_PROMPT_W2}, {"role": "user", "content": q}]
        for q in questions[:num_requests]
    ]
    return Workload("W2", conversations, max_tokens, ignore_eos=True)


TENANTS = [
    ("Aurora Dental Clinics", "dental care", "cleanings, fillings and braces"),
    ("Brightline Rail", "train travel", "tickets, seat reservations and rail passes"),
    ("Copperleaf Bank", "personal banking", "accounts, cards and small loans"),
    ("Driftwood Hotels", "hotel stays", "rooms, suites and late check-out"),
    ("Evergreen Energy", "home electricity", "tariffs, meter readings and solar panels"),
    ("Foxglove Pharmacy", "prescriptions", "refills, delivery and vaccinations"),
    ("Granite Insurance", "car insurance", "policies, claims and roadside help"),
    ("Harbor Telecom", "mobile phone plans", "data bundles, roaming and new phones"),
]
RULE_TEMPLATES = [
    "Always greet the customer by saying you represent {name}.",
    "You only answer questions about {topic}; for anything else, politely decline.",
    "Our products are {products}; describe them accurately and never invent features.",
    "Opening hours for {name} are eight to six on weekdays and nine to one on Saturdays.",
    "Customers can reach {name} by phone, by email or through the mobile app.",
    "Never promise a refund; explain that the {topic} team reviews every request.",
    "If a customer mentions an emergency, tell them to call the emergency services first.",
    "Keep answers under five sentences and end with a question that moves things forward.",
    "Do not share internal procedures of {name}, staff names or system details.",
    "When you are unsure, say so, and offer to connect the customer with a specialist.",
    "Prices for {products} change often; point customers to the {name} website.",
    "Be warm but professional; avoid slang, jokes about customers and emojis.",
    "Summaries of a customer's account may only be given after they confirm their identity.",
    "Complaints about {topic} are logged and answered within three business days.",
    "Offer the {name} loyalty programme when a customer asks about discounts.",
    "Explain any fees for {products} clearly, with an example when that helps.",
    "Do not give legal, medical or tax advice beyond what {name} publishes.",
    "If a customer is unhappy, apologise once, then focus on a concrete next step.",
    "For accessibility needs, describe the support {name} offers and how to request it.",
    "Sign every answer with 'The {name} team'.",
]
TENANT_QUESTIONS = [
    "What are your opening hours?",
    "How do I make a complaint?",
    "Can I get a discount?",
    "What does it cost?",
    "How do I contact you?",
    "Is there a fee for changes?",
    "Can you check my account?",
    "I am not happy with the service.",
    "Do you offer support for wheelchair users?",
    "What products do you have?",
    "Can I get a refund?",
    "How long does a complaint take?",
    "Is your app free?",
    "Who do I talk to in an emergency?",
    "Can I speak to a specialist?",
    "Do you have a loyalty programme?",
]


def tenant_system_prompt(name: str, topic: str, products: str) -> str:
    """A ~500-token system prompt that differs between tenants from its first words."""
    rules = [r.format(name=name, topic=topic, products=products) for r in RULE_TEMPLATES]
    intro = f"{name} assistant instructions. You help customers of {name} with {topic}. "
    return intro + " ".join(f"Rule {i + 1}: {rule}" for i, rule in enumerate(rules))


def multi_tenant(num_requests: int = 128, max_tokens: int = 32, seed: int = 0) -> Workload:
    """8 tenants with distinct ~500-token system prompts, many questions each, shuffled."""
    conversations = [
        [
            {"role": "system", "content": tenant_system_prompt(*tenant)},
            {"role": "user", "content": question},
        ]
        for tenant in TENANTS
        for question in TENANT_QUESTIONS
    ]
    random.Random(seed).shuffle(conversations)
    while len(conversations) < num_requests:
        conversations += conversations
    return Workload("multi-tenant", conversations[:num_requests], max_tokens, ignore_eos=True)


def mixed(num_requests: int = 48, seed: int = 0) -> Workload:
    """What a chat service sees: varied prompts, long-tailed replies that end at EOS.

    Prompts, drawn at random: half are W1's short questions (~40 tokens with the template),
    three in ten ask one of the eight tenants' ~500-token system prompts a question, two in
    ten ask for a summary of half of W2's ~600-token policy (~300 tokens). Output budgets
    are log-normal, median 64 tokens (sigma 1: p90 ~230), clipped to [8, 512]; the model
    usually stops earlier, at EOS.
    """
    rng = random.Random(seed)
    chat = [form.format(subject) for form in FORMS for subject in SUBJECTS]
    words = SYSTEM_PROMPT_W2.split()
    halves = [" ".join(words[: len(words) // 2]), " ".join(words[len(words) // 2 :])]
    conversations, budgets = [], []
    for _ in range(num_requests):
        kind = rng.random()
        if kind < 0.5:
            conversation = [{"role": "user", "content": rng.choice(chat)}]
        elif kind < 0.8:
            tenant = rng.choice(TENANTS)
            conversation = [
                {"role": "system", "content": tenant_system_prompt(*tenant)},
                {"role": "user", "content": rng.choice(TENANT_QUESTIONS)},
            ]
        else:
            passage = rng.choice(halves)
            request = f"Summarize this policy in two sentences:\n\n{passage}"
            conversation = [{"role": "user", "content": request}]
        conversations.append(conversation)
        budgets.append(min(512, max(8, round(rng.lognormvariate(math.log(64), 1.0)))))
    return Workload("mixed", conversations, max(budgets), False, tuple(budgets))


def from_jsonl(path: Path, max_tokens: int = 128) -> Workload:
    """One request per line: {"messages": [...]} or {"prompt": "..."}."""
    conversations = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        record = json.loads(line)
        if "messages" in record:
            conversations.append(record["messages"])
        elif "prompt" in record:
            conversations.append([{"role": "user", "content": record["prompt"]}])
        else:
            raise ValueError(f"{path}:{number}: a line needs 'messages' or 'prompt'")
    if not conversations:
        raise ValueError(f"{path} holds no requests")
    return Workload(path.stem, conversations, max_tokens, ignore_eos=False)


def named_workload(name: str, num_requests: int, max_tokens: int) -> Workload:
    """chat (W1), shared-prefix (W2), multi-tenant, mixed, or a .jsonl file."""
    if name == "mixed":
        return mixed(num_requests)
    if name == "chat":
        base = w1(64, max_tokens)
    elif name == "shared-prefix":
        base = w2(64, max_tokens)
    elif name == "multi-tenant":
        return multi_tenant(num_requests, max_tokens)
    else:
        base = from_jsonl(Path(name), max_tokens)
    conversations = list(base.conversations)
    while len(conversations) < num_requests:
        conversations += base.conversations
    return Workload(base.name, conversations[:num_requests], max_tokens, base.ignore_eos)
