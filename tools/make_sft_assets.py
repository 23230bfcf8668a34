"""Generate the SFT benchmark assets shipped in clusterbench/train/assets.

    python tools/make_sft_assets.py [--out DIR] [--n 8000] [--seed 20240601]

Writes:
  sft.jsonl       self-authored instruction/response pairs in alpaca form
                  ({"instruction", "input", "output"}), one per line.
  tokenizer.json  a byte-level BPE (tokenizers library) trained on sft.jsonl,
                  vocab 4096, special tokens <pad>=0, <s>=1, </s>=2.

Licence of the generated data: CC0 1.0 (public domain dedication). Every
example is produced by the templates and small fact tables in this file; no
third-party text is used.

The output is deterministic: one seeded random.Random drives every choice,
so running the script twice gives byte-identical files.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import random
from pathlib import Path

# Kept in step with clusterbench.stages.train.data (the tokenizer is trained on the
# same rendering the loader feeds the model, so template pieces become tokens).
SPECIAL_TOKENS = ["<pad>", "<s>", "</s>"]
VOCAB_SIZE = 4096
DEFAULT_OUT = Path(__file__).resolve().parents[1] / "src/clusterbench/stages/train/assets"

# country, capital, continent -- a small hand-written table.
COUNTRIES = [
    ("France", "Paris", "Europe"), ("Germany", "Berlin", "Europe"),
    ("Italy", "Rome", "Europe"), ("Spain", "Madrid", "Europe"),
    ("Portugal", "Lisbon", "Europe"), ("Netherlands", "Amsterdam", "Europe"),
    ("Belgium", "Brussels", "Europe"), ("Austria", "Vienna", "Europe"),
    ("Switzerland", "Bern", "Europe"), ("Poland", "Warsaw", "Europe"),
    ("Sweden", "Stockholm", "Europe"), ("Norway", "Oslo", "Europe"),
    ("Finland", "Helsinki", "Europe"), ("Denmark", "Copenhagen", "Europe"),
    ("Iceland", "Reykjavík", "Europe"), ("Ireland", "Dublin", "Europe"),
    ("Greece", "Athens", "Europe"), ("Hungary", "Budapest", "Europe"),
    ("Czechia", "Prague", "Europe"), ("Romania", "Bucharest", "Europe"),
    ("Japan", "Tokyo", "Asia"), ("China", "Beijing", "Asia"),
    ("India", "New Delhi", "Asia"), ("South Korea", "Seoul", "Asia"),
    ("Thailand", "Bangkok", "Asia"), ("Vietnam", "Hanoi", "Asia"),
    ("Indonesia", "Jakarta", "Asia"), ("Philippines", "Manila", "Asia"),
    ("Malaysia", "Kuala Lumpur", "Asia"), ("Nepal", "Kathmandu", "Asia"),
    ("Mongolia", "Ulaanbaatar", "Asia"), ("Turkey", "Ankara", "Asia"),
    ("Egypt", "Cairo", "Africa"), ("Kenya", "Nairobi", "Africa"),
    ("Nigeria", "Abuja", "Africa"), ("Ghana", "Accra", "Africa"),
    ("Ethiopia", "Addis Ababa", "Africa"), ("Morocco", "Rabat", "Africa"),
    ("Senegal", "Dakar", "Africa"), ("Tanzania", "Dodoma", "Africa"),
    ("Canada", "Ottawa", "North America"), ("Mexico", "Mexico City", "North America"),
    ("Cuba", "Havana", "North America"), ("Jamaica", "Kingston", "North America"),
    ("Panama", "Panama City", "North America"),
    ("United States", "Washington, D.C.", "North America"),
    ("Brazil", "Brasília", "South America"), ("Argentina", "Buenos Aires", "South America"),
    ("Chile", "Santiago", "South America"), ("Peru", "Lima", "South America"),
    ("Colombia", "Bogotá", "South America"), ("Uruguay", "Montevideo", "South America"),
    ("Australia", "Canberra", "Oceania"), ("New Zealand", "Wellington", "Oceania"),
    ("Fiji", "Suva", "Oceania"), ("Samoa", "Apia", "Oceania"),
]

ADJECTIVES = ["quick", "lazy", "small", "bright", "quiet", "old", "young", "happy",
              "brave", "curious", "gentle", "busy", "clever", "tired", "friendly", "green"]
NOUNS = ["fox", "dog", "cat", "teacher", "farmer", "river", "robot", "pilot", "baker",
         "student", "bird", "train", "garden", "painter", "doctor", "child", "sailor"]
VERBS = ["jumps over", "walks past", "looks at", "waits for", "runs toward", "sings to",
         "follows", "carries", "finds", "helps", "watches", "draws"]
PLACES = ["in the park", "near the station", "by the lake", "at the market", "on the hill",
          "under the bridge", "in the morning", "after lunch", "before dawn", "at home"]
WORDS = ["apple", "banana", "cherry", "mango", "orange", "grape", "lemon", "peach",
         "window", "pencil", "rocket", "planet", "forest", "silver", "marble", "copper",
         "bottle", "ladder", "candle", "garden", "kitten", "puzzle", "rabbit", "tunnel",
         "yellow", "purple", "summer", "winter", "butter", "coffee", "island", "mirror"]
ANTONYMS = [("hot", "cold"), ("big", "small"), ("fast", "slow"), ("early", "late"),
            ("light", "dark"), ("happy", "sad"), ("open", "closed"), ("full", "empty"),
            ("strong", "weak"), ("high", "low"), ("rich", "poor"), ("hard", "soft"),
            ("young", "old"), ("wet", "dry"), ("loud", "quiet"), ("long", "short"),
            ("thick", "thin"), ("clean", "dirty"), ("first", "last"), ("up", "down")]
MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August",
          "September", "October", "November", "December"]
ONES = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine",
        "ten", "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen",
        "seventeen", "eighteen", "nineteen"]
WEEKDAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
TENS = ["", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]


def sentence(r: random.Random) -> str:
    return (f"The {r.choice(ADJECTIVES)} {r.choice(NOUNS)} {r.choice(VERBS)} "
            f"the {r.choice(ADJECTIVES)} {r.choice(NOUNS)} {r.choice(PLACES)}.")


def date_text(d: dt.date) -> str:
    return f"{d.day} {MONTHS[d.month - 1]} {d.year}"


def random_date(r: random.Random) -> dt.date:
    return dt.date(1990, 1, 1) + dt.timedelta(days=r.randrange(0, 365 * 45))


def number_words(n: int) -> str:
    if n < 20:
        return ONES[n]
    if n < 100:
        return TENS[n // 10] + ("" if n % 10 == 0 else "-" + ONES[n % 10])
    rest = n % 100
    return ONES[n // 100] + " hundred" + ("" if rest == 0 else " " + number_words(rest))


def roman(n: int) -> str:
    out = []
    for value, sym in [(1000, "M"), (900, "CM"), (500, "D"), (400, "CD"), (100, "C"),
                       (90, "XC"), (50, "L"), (40, "XL"), (10, "X"), (9, "IX"), (5, "V"),
                       (4, "IV"), (1, "I")]:
        while n >= value:
            out.append(sym)
            n -= value
    return "".join(out)


def fmt(x: float) -> str:
    return f"{x:.2f}".rstrip("0").rstrip(".")


# Each task returns (instruction, input, output).

def t_add(r):
    a, b = r.randint(10, 999), r.randint(10, 999)
    q = r.choice([f"What is {a} + {b}?", f"Add {a} and {b}.", f"Compute the sum of {a} and {b}."])
    return q, "", f"{a} + {b} = {a + b}. The answer is {a + b}."


def t_sub(r):
    a, b = sorted((r.randint(10, 999), r.randint(10, 999)), reverse=True)
    q = r.choice([f"What is {a} - {b}?", f"Subtract {b} from {a}."])
    return q, "", f"{a} - {b} = {a - b}. The answer is {a - b}."


def t_mul(r):
    a, b = r.randint(11, 99), r.randint(3, 29)
    q = r.choice([f"What is {a} × {b}?", f"Multiply {a} by {b}.", f"Calculate {a} times {b}."])
    if b < 10:
        work = f"{a} × {b} = {a * b}."
    else:
        t, u = b - b % 10, b % 10
        work = (f"{a} × {b} = {a} × {t} + {a} × {u} = {a * t} + {a * u} = {a * b}."
                if u else f"{a} × {b} = {a * b}.")
    return q, "", f"{work} The answer is {a * b}."


def t_div(r):
    b, q_ = r.randint(2, 12), r.randint(2, 99)
    a = b * q_
    return r.choice([f"What is {a} ÷ {b}?", f"Divide {a} by {b}."]), "", \
        f"{b} × {q_} = {a}, so {a} ÷ {b} = {q_}. The answer is {q_}."


def t_sum_list(r):
    xs = [r.randint(1, 50) for _ in range(r.randint(3, 6))]
    steps, acc = [], xs[0]
    for x in xs[1:]:
        steps.append(f"{acc} + {x} = {acc + x}")
        acc += x
    return "Find the sum of these numbers.", ", ".join(map(str, xs)), \
        "; ".join(steps) + f". The sum is {acc}."


# (unit, its singular, target unit, factor)
UNITS = [("kilometers", "kilometer", "meters", 1000), ("meters", "meter", "centimeters", 100),
         ("kilograms", "kilogram", "grams", 1000), ("hours", "hour", "minutes", 60),
         ("minutes", "minute", "seconds", 60), ("liters", "liter", "milliliters", 1000),
         ("days", "day", "hours", 24), ("weeks", "week", "days", 7),
         ("feet", "foot", "inches", 12), ("inches", "inch", "centimeters", 2.54),
         ("miles", "mile", "kilometers", 1.609)]


def t_units(r):
    src, one, dst, k = r.choice(UNITS)
    x = r.randint(2, 60)
    q = r.choice([f"Convert {x} {src} to {dst}.", f"How many {dst} are in {x} {src}?"])
    return q, "", f"1 {one} = {fmt(k)} {dst}, so {x} {src} = {x} × {fmt(k)} = {fmt(x * k)} {dst}."


def t_temp(r):
    if r.random() < 0.5:
        c = r.randrange(-20, 45)
        f = c * 9 / 5 + 32
        return f"Convert {c}°C to Fahrenheit.", "", \
            f"F = C × 9/5 + 32 = {c} × 9/5 + 32 = {fmt(f)}. So {c}°C is {fmt(f)}°F."
    f = r.randrange(-4, 113)
    c = (f - 32) * 5 / 9
    return f"Convert {f}°F to Celsius.", "", \
        f"C = (F - 32) × 5/9 = ({f} - 32) × 5/9 = {fmt(c)}. So {f}°F is {fmt(c)}°C."


def t_sort_nums(r):
    xs = r.sample(range(1, 200), r.randint(4, 8))
    desc = r.random() < 0.4
    order = "descending" if desc else "ascending"
    return f"Sort the following numbers in {order} order.", ", ".join(map(str, xs)), \
        ", ".join(map(str, sorted(xs, reverse=desc)))


def t_sort_words(r):
    ws = r.sample(WORDS, r.randint(3, 7))
    return "Sort these words alphabetically.", " ".join(ws), " ".join(sorted(ws))


def t_minmax(r):
    xs = r.sample(range(1, 500), r.randint(4, 8))
    if r.random() < 0.5:
        return "What is the largest number in this list?", ", ".join(map(str, xs)), \
            f"The largest number is {max(xs)}."
    return "What is the smallest number in this list?", ", ".join(map(str, xs)), \
        f"The smallest number is {min(xs)}."


def t_reverse_words(r):
    s = sentence(r)[:-1]
    return "Reverse the order of the words in this sentence.", s, " ".join(s.split()[::-1])


def t_reverse_letters(r):
    w = r.choice(WORDS + NOUNS)
    return r.choice([f"Spell the word \"{w}\" backwards.", f"Reverse the letters of \"{w}\"."]), \
        "", f"\"{w}\" backwards is \"{w[::-1]}\"."


def t_count_letter(r):
    w = r.choice(WORDS)
    ch = r.choice(sorted(set(w)) + ["e", "a", "o"])
    n = w.count(ch)
    return f"How many times does the letter '{ch}' appear in \"{w}\"?", "", \
        (f"Spelling it out: {'-'.join(w)}. The letter '{ch}' appears {n} "
         f"time{'s' if n != 1 else ''}.")


def t_count_words(r):
    s = sentence(r)
    n = len(s.split())
    return "How many words are in this sentence?", s, f"The sentence has {n} words."


def t_capital(r):
    c, cap, _ = r.choice(COUNTRIES)
    q = r.choice([f"What is the capital of {c}?", f"Name the capital city of {c}.",
                  f"Which city is the capital of {c}?"])
    return q, "", f"The capital of {c} is {cap}."


def t_country_of_capital(r):
    c, cap, _ = r.choice(COUNTRIES)
    return f"{cap} is the capital of which country?", "", f"{cap} is the capital of {c}."


def t_continent(r):
    c, _, cont = r.choice(COUNTRIES)
    return f"On which continent is {c}?", "", f"{c} is in {cont}."


def t_case(r):
    s = sentence(r)
    kind = r.choice(["uppercase", "lowercase", "title case"])
    out = {"uppercase": s.upper(), "lowercase": s.lower(), "title case": s.title()}[kind]
    return f"Convert the following text to {kind}.", s, out


def t_weekday(r):
    d = random_date(r)
    return f"What day of the week was {date_text(d)}?", "", \
        f"{date_text(d)} was a {WEEKDAYS[d.weekday()]}."


def t_add_days(r):
    d, n = random_date(r), r.randint(1, 60)
    e = d + dt.timedelta(days=n)
    return f"What is the date {n} days after {date_text(d)}?", "", \
        f"{n} days after {date_text(d)} is {date_text(e)}, a {WEEKDAYS[e.weekday()]}."


def t_days_between(r):
    d = random_date(r)
    e = d + dt.timedelta(days=r.randint(1, 120))
    return f"How many days are there from {date_text(d)} to {date_text(e)}?", "", \
        f"From {date_text(d)} to {date_text(e)} is {(e - d).days} days."


def t_parity(r):
    n = r.randint(1, 9999)
    kind = "even" if n % 2 == 0 else "odd"
    return f"Is {n} even or odd?", "", \
        f"The last digit of {n} is {n % 10}, so {n} is {kind}."


def t_compare(r):
    a, b = r.sample(range(1, 1000), 2)
    return f"Which is larger, {a} or {b}?", "", f"{max(a, b)} is larger than {min(a, b)}."


def t_words(r):
    n = r.randint(1, 999)
    return f"Write the number {n} in words.", "", f"{n} is written as \"{number_words(n)}\"."


def t_roman(r):
    n = r.randint(1, 2030)
    return f"Write {n} in Roman numerals.", "", f"{n} in Roman numerals is {roman(n)}."


def t_antonym(r):
    a, b = r.choice(ANTONYMS)
    if r.random() < 0.5:
        a, b = b, a
    return f"What is the opposite of \"{a}\"?", "", f"The opposite of \"{a}\" is \"{b}\"."


def t_first_last(r):
    w = r.choice(WORDS)
    return f"What are the first and last letters of \"{w}\"?", "", \
        f"The first letter is '{w[0]}' and the last letter is '{w[-1]}'."


def t_vowels(r):
    w = r.choice(WORDS + NOUNS)
    vs = [c for c in w if c in "aeiou"]
    return "List the vowels in this word, in order.", w, \
        f"The vowels are {', '.join(vs)} ({len(vs)} in total)."


def t_prime(r):
    n = r.randint(11, 199)
    for p in range(2, int(n ** 0.5) + 1):
        if n % p == 0:
            return f"Is {n} a prime number?", "", f"{n} = {p} × {n // p}, so {n} is not prime."
    return f"Is {n} a prime number?", "", \
        f"No number from 2 to {int(n ** 0.5)} divides {n}, so {n} is prime."


def t_leap(r):
    y = r.choice([r.randint(1800, 2100), r.randrange(1600, 2400, 100), r.randrange(1904, 2100, 4)])
    if y % 400 == 0:
        why, ok = f"{y} is divisible by 400", True
    elif y % 100 == 0:
        why, ok = f"{y} is divisible by 100 but not by 400", False
    elif y % 4 == 0:
        why, ok = f"{y} is divisible by 4 and not by 100", True
    else:
        why, ok = f"{y} is not divisible by 4", False
    return f"Is {y} a leap year?", "", f"{why}, so {y} is {'' if ok else 'not '}a leap year."


def t_month_days(r):
    y, m = r.randint(1990, 2040), r.randint(1, 12)
    n = ((dt.date(y + m // 12, m % 12 + 1, 1)) - dt.date(y, m, 1)).days
    return f"How many days are in {MONTHS[m - 1]} {y}?", "", \
        f"{MONTHS[m - 1]} {y} has {n} days."


def t_next_month(r):
    m, k = r.randrange(12), r.randint(1, 11)
    months = f"{k} month{'s' if k > 1 else ''}"
    return f"Which month comes {months} after {MONTHS[m]}?", "", \
        f"Counting {months} on from {MONTHS[m]} gives {MONTHS[(m + k) % 12]}."


def t_sequence(r):
    a, d = r.randint(1, 50), r.randint(2, 15)
    xs = [a + d * i for i in range(5)]
    return "What is the next number in this sequence?", ", ".join(map(str, xs[:4])), \
        f"Each number is {d} more than the one before, so the next number is {xs[4]}."


def t_alpha_pos(r):
    c = r.choice("abcdefghijklmnopqrstuvwxyz")
    return f"What position is the letter '{c}' in the alphabet?", "", \
        f"'{c}' is letter number {ord(c) - 96} of the English alphabet."


def t_percent(r):
    p, x = r.choice([5, 10, 20, 25, 50, 75]), r.randrange(20, 1000, 20)
    return f"What is {p}% of {x}?", "", f"{p}% of {x} = {x} × {p} / 100 = {fmt(x * p / 100)}."


def t_square(r):
    n = r.randint(2, 40)
    return r.choice([f"What is {n} squared?", f"What is {n} to the power of 2?"]), "", \
        f"{n} × {n} = {n * n}."


def t_clock(r):
    h, m, k = r.randint(1, 11), r.randrange(0, 60, 5), r.randrange(5, 120, 5)
    t = h * 60 + m + k
    return f"What time is it {k} minutes after {h}:{m:02d}?", "", \
        f"{h}:{m:02d} plus {k} minutes is {t // 60}:{t % 60:02d}."


def t_remove_vowels(r):
    w = r.choice(WORDS + NOUNS)
    return "Remove all the vowels from this word.", w, \
        "".join(c for c in w if c not in "aeiou")


TASKS = [t_add, t_sub, t_mul, t_div, t_sum_list, t_units, t_temp, t_sort_nums, t_sort_words,
         t_minmax, t_reverse_words, t_reverse_letters, t_count_letter, t_count_words,
         t_capital, t_country_of_capital, t_continent, t_case, t_weekday, t_add_days,
         t_days_between, t_parity, t_compare, t_words, t_roman, t_antonym, t_first_last,
         t_vowels, t_prime, t_leap, t_month_days, t_next_month, t_sequence, t_alpha_pos,
         t_percent, t_square, t_clock, t_remove_vowels]


def make_examples(n: int, seed: int) -> list[dict[str, str]]:
    r = random.Random(seed)
    out = []
    for _ in range(n):
        instruction, inp, output = r.choice(TASKS)(r)
        out.append({"instruction": instruction, "input": inp, "output": output})
    return out


def train_tokenizer(texts: list[str]):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    # add_prefix_space=False keeps decode(encode(x)) == x exactly.
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE, min_frequency=2, special_tokens=SPECIAL_TOKENS,
        # The full byte alphabet, so any UTF-8 text (user data) stays encodable.
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(texts, trainer=trainer)
    return tok


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--n", type=int, default=8000)
    ap.add_argument("--seed", type=int, default=20240601)
    args = ap.parse_args()

    import sys
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    from clusterbench.stages.train.data import render_alpaca  # the exact text the model sees

    examples = make_examples(args.n, args.seed)
    args.out.mkdir(parents=True, exist_ok=True)
    data = "".join(json.dumps(e, ensure_ascii=False) + "\n" for e in examples)
    (args.out / "sft.jsonl").write_text(data, encoding="utf-8", newline="\n")
    texts = ["".join(seg for seg, _ in render_alpaca(e["instruction"], e["input"], e["output"]))
             for e in examples]
    tok = train_tokenizer(texts)
    (args.out / "tokenizer.json").write_text(tok.to_str(pretty=False) + "\n",
                                             encoding="utf-8", newline="\n")
    print(f"{len(examples)} examples, {len(data.encode())} bytes; "
          f"vocab {tok.get_vocab_size()}")


if __name__ == "__main__":
    main()
