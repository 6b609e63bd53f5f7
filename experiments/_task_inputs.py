"""Real inputs for the task-agreement experiment (``exp_task_agreement.py``), made here.

- speech synthesised with espeak-ng, mixed with silence and noise, in the 512-sample
  chunks at 16 kHz that Silero VAD takes (with the 64 samples of context before each
  chunk that ``silero_vad.OnnxWrapper`` prepends);
- text lines rendered with PIL in the DejaVu fonts, upright or turned 180 degrees, and
  normalised as RapidOCR's direction classifier and recogniser do;
- captchas of 4 or 5 letters and digits, each tilted, with lines and specks across them;
- real files of this machine, as Magika's feature extractor reads them (the first and
  last 1,024 bytes of the stripped first and last 4 KiB, padded with 256).

Every generator is seeded. Nothing here imports autopart.
"""

from __future__ import annotations

import math
import os
import shutil
import subprocess
import tempfile
import wave
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFont
from scipy.signal import resample_poly

RATE = 16_000  # Hz, Silero VAD's rate as the suite freezes it
CHUNK = 512  # new samples per Silero call at 16 kHz
CONTEXT = 64  # samples of the previous chunk Silero's wrapper prepends at 16 kHz
FONTS = Path("/usr/share/fonts/truetype/dejavu")
SENTENCES = {
    "en-us": [
        "The quick brown fox jumps over the lazy dog.",
        "Please call Stella and ask her to bring these things with her from the store.",
        "It is a bright cold day in April, and the clocks are striking thirteen.",
        "Turn left at the next light, then keep going for about two miles.",
        "Seven hundred and forty two people signed the letter by Tuesday night.",
    ],
    "en-gb": [
        "We will meet at the station at half past nine tomorrow morning.",
        "She sells sea shells by the sea shore, or so the story goes.",
        "Could you read the last paragraph again, a little more slowly?",
    ],
    "de": ["Der Zug nach Hamburg fährt heute um acht Uhr von Gleis drei ab."],
    "fr-fr": ["Il fait beau aujourd'hui, allons nous promener au bord de la rivière."],
    "es": ["Mañana por la mañana vamos a visitar el museo de la ciudad."],
}
WORD_TEXT = (
    "time year people way day man thing woman life child world school state family student "
    "group country problem hand part place case week company system program question work "
    "government number night point home water room mother area money story fact month lot "
    "right study book eye job word business issue side kind head house service friend father "
    "power hour game line end member law car city community name president team minute idea "
    "kid body information back parent face others level office door health person art war "
    "history party result change morning reason research girl guy moment air teacher force "
    "education invoice total amount date order receipt price tax street road avenue"
)
WORDS = WORD_TEXT.split()
READABLE = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"


def have_espeak() -> bool:
    """Whether espeak-ng is on the PATH."""
    return shutil.which("espeak-ng") is not None


def speak(text: str, voice: str, speed: int, pitch: int) -> np.ndarray:
    """``text`` spoken by espeak-ng, as float32 samples in [-1, 1] at 16 kHz."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "speech.wav"
        command = ["espeak-ng", "-v", voice, "-s", str(speed), "-p", str(pitch), "-w", str(path)]
        subprocess.run([*command, text], check=True, capture_output=True)
        with wave.open(str(path)) as handle:
            rate = handle.getframerate()
            frames = handle.readframes(handle.getnframes())
    samples = np.frombuffer(frames, dtype=np.int16).astype(np.float64) / 32768.0
    divisor = math.gcd(RATE, rate)
    return resample_poly(samples, RATE // divisor, rate // divisor).astype(np.float32)


def noise(rng: np.random.Generator, length: int, level: float, colour: str) -> np.ndarray:
    """``length`` samples of white or brown noise with RMS ``level``."""
    white = rng.standard_normal(length)
    shaped = white if colour == "white" else np.cumsum(white) - np.cumsum(white).mean()
    return (shaped * level / max(float(np.std(shaped)), 1e-12)).astype(np.float32)


def speech_streams(count: int, seed: int) -> list[np.ndarray]:
    """``count`` streams at 16 kHz: silence or noise, an utterance, silence or noise again.

    Voices, speeds, pitches, loudness and background noise (none, white or brown, from
    -70 to -30 dBFS) vary with the seed; a quarter of the streams hold no speech at all.
    """
    rng = np.random.default_rng(seed)
    spoken = [(voice, text) for voice, texts in SENTENCES.items() for text in texts]
    streams = []
    for index in range(count):
        voice, text = spoken[index % len(spoken)]
        pieces = [np.zeros(int(rng.uniform(0.3, 1.2) * RATE), np.float32)]
        if index % 4 != 3:
            utterance = speak(text, voice, int(rng.integers(120, 220)), int(rng.integers(20, 80)))
            gain = 10 ** (rng.uniform(-20, 0) / 20) / max(float(np.abs(utterance).max()), 1e-6)
            pieces.append(utterance * np.float32(gain))
        pieces.append(np.zeros(int(rng.uniform(0.3, 1.2) * RATE), np.float32))
        stream = np.concatenate(pieces)
        colour = ("none", "white", "brown")[index % 3]
        if colour != "none":
            stream = stream + noise(rng, len(stream), 10 ** (rng.uniform(-70, -30) / 20), colour)
        streams.append(np.clip(stream, -1.0, 1.0).astype(np.float32))
    return streams


def vad_chunks(stream: np.ndarray) -> Iterator[np.ndarray]:
    """Silero's inputs for ``stream``: each 512-sample chunk after 64 samples of context.

    The first chunk's context is zeros, as the wrapper's is after a reset; a last partial
    chunk is zero-padded.
    """
    padded = np.concatenate([np.zeros(CONTEXT, np.float32), stream])
    chunks = math.ceil(len(stream) / CHUNK)
    padded = np.pad(padded, (0, CONTEXT + chunks * CHUNK - len(padded)))
    for index in range(chunks):
        start = index * CHUNK
        yield padded[start : start + CONTEXT + CHUNK][None, :].astype(np.float32)


@dataclass(frozen=True)
class TextLine:
    """A rendered line: its text, its image (RGB, uint8) and whether it is upside down."""

    text: str
    image: np.ndarray
    turned: bool


def random_text(rng: np.random.Generator, longest: int) -> str:
    """Words, numbers and the odd code, at most ``longest`` characters."""
    parts: list[str] = []
    while True:
        kind = rng.integers(0, 6)
        if kind == 0:
            part = str(int(rng.integers(0, 100_000)))
        elif kind == 1:
            part = "".join(rng.choice(list(READABLE), size=int(rng.integers(3, 7))))
        else:
            word = str(rng.choice(WORDS))
            part = word.capitalize() if rng.random() < 0.3 else word
        if parts and len(" ".join([*parts, part])) > longest:
            break
        parts.append(part)
    return " ".join(parts)[:longest]


def render_lines(count: int, seed: int, longest: int, turn: bool) -> list[TextLine]:
    """``count`` lines of dark text on a light ground in DejaVu fonts, sizes 20 to 44.

    With ``turn``, every other line is turned 180 degrees.
    """
    rng = np.random.default_rng(seed)
    fonts = sorted(p for p in FONTS.glob("DejaVu*.ttf") if "ExtraLight" not in p.name)
    lines = []
    for index in range(count):
        text = random_text(rng, longest)
        font = ImageFont.truetype(str(fonts[index % len(fonts)]), int(rng.integers(20, 45)))
        left, top, right, bottom = font.getbbox(text)
        margin = int(rng.integers(2, 12))
        size = (right - left + 2 * margin, bottom - top + 2 * margin)
        ground = int(rng.integers(190, 256))
        image = Image.new("RGB", size, (ground,) * 3)
        ink = int(rng.integers(0, 70))
        ImageDraw.Draw(image).text((margin - left, margin - top), text, font=font, fill=(ink,) * 3)
        turned = turn and index % 2 == 1
        if turned:
            image = image.rotate(180)
        lines.append(TextLine(text, np.asarray(image), turned))
    return lines


CAPTCHA_CHARACTERS = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ"


def render_captchas(count: int, seed: int, size: tuple[int, int] = (160, 60)) -> list[TextLine]:
    """``count`` captchas of 4 or 5 characters of ``CAPTCHA_CHARACTERS``, RGB, ``size``.

    Each character is drawn in its own DejaVu font, size, dark colour and tilt (up to 25
    degrees), on a light ground with one to three lines and 200 specks across it.
    """
    rng = np.random.default_rng(seed)
    fonts = sorted(p for p in FONTS.glob("DejaVu*.ttf") if "ExtraLight" not in p.name)
    width, height = size
    found = []
    for _ in range(count):
        text = "".join(rng.choice(list(CAPTCHA_CHARACTERS), size=int(rng.integers(4, 6))))
        image = Image.new("RGB", size, _colour(rng, 200, 256))
        left = 8
        for character in text:
            font = ImageFont.truetype(
                str(fonts[rng.integers(len(fonts))]), int(rng.integers(30, 42))
            )
            glyph = Image.new("RGBA", (50, height), (0, 0, 0, 0))
            ImageDraw.Draw(glyph).text(
                (5, 5), character, font=font, fill=(*_colour(rng, 0, 120), 255)
            )
            glyph = glyph.rotate(float(rng.uniform(-25, 25)), resample=Image.Resampling.BICUBIC)
            image.paste(glyph, (left, int(rng.integers(-8, 4))), glyph)
            left += int(rng.integers(22, 30))
        draw = ImageDraw.Draw(image)
        for _ in range(int(rng.integers(1, 4))):
            ends = [(int(rng.integers(width)), int(rng.integers(height))) for _ in range(2)]
            draw.line(ends, fill=_colour(rng, 0, 160), width=2)
        for _ in range(200):
            draw.point(
                (int(rng.integers(width)), int(rng.integers(height))), fill=_colour(rng, 0, 256)
            )
        found.append(TextLine(text, np.asarray(image), False))
    return found


def _colour(rng: np.random.Generator, low: int, high: int) -> tuple[int, int, int]:
    """An RGB colour, each channel drawn from [low, high)."""
    red, green, blue = (int(v) for v in rng.integers(low, high, 3))
    return red, green, blue


def ocr_input(image: np.ndarray, height: int, width: int) -> np.ndarray:
    """RapidOCR's resize_norm_img: height ``height``, width kept in ratio up to ``width``.

    Pixels go to (x / 255 - 0.5) / 0.5, channels first, the rest of the width padded
    with zeros; shape (1, 3, height, width), float32.
    """
    rows, columns = image.shape[:2]
    resized_width = min(width, math.ceil(height * columns / rows))
    resized = Image.fromarray(image).resize((resized_width, height), Image.Resampling.BILINEAR)
    pixels = np.asarray(resized, np.float32).transpose(2, 0, 1) / 255.0
    padded = np.zeros((3, height, width), np.float32)
    padded[:, :, :resized_width] = (pixels - 0.5) / 0.5
    return padded[None]


def ctc_decode(probabilities: np.ndarray, characters: Sequence[str]) -> str:
    """Greedy CTC: the argmax per step, repeats merged, blanks (index 0) dropped."""
    best = np.asarray(probabilities).reshape(-1, probabilities.shape[-1]).argmax(axis=-1)
    kept = [int(i) for j, i in enumerate(best) if i != 0 and (j == 0 or i != best[j - 1])]
    return "".join(characters[i] for i in kept)


def rec_characters(metadata: str) -> list[str]:
    """PP-OCR's recogniser classes: blank, the model's ``character`` metadata, a space."""
    return ["blank", *metadata.split("\n"), " "]


def magika_features(data: bytes, part: int = 1024, block: int = 4096, pad: int = 256) -> np.ndarray:
    """Magika's input for a file's ``data``: beginning and end bytes, padded; (1, 2048) int32.

    The first and last ``block`` bytes are read; the beginning is left-stripped of
    whitespace and the end right-stripped (both stripped when the file fits one block);
    ``part`` bytes of each are kept and padded with ``pad``, the end on its left.
    """
    small = len(data) <= block
    begin = data[:block].strip() if small else data[:block].lstrip()
    end = data[-block:].strip() if small else data[-block:].rstrip()
    head = list(begin[:part]) + [pad] * max(0, part - len(begin))
    tail = [pad] * max(0, part - len(end)) + list(end[-part:])
    return np.asarray([head + tail], dtype=np.int32)


def machine_files(count: int, seed: int, roots: Sequence[str], smallest: int = 8) -> list[Path]:
    """``count`` regular files under ``roots``, spread over as many kinds as there are.

    Files are grouped by suffix (or ``no suffix``); groups are taken in turn in a seeded
    random order, a seeded random file of each, until ``count`` are chosen. Files under
    ``smallest`` bytes (Magika does not run its model on them) and unreadable files are
    skipped.
    """
    groups: dict[str, list[Path]] = {}
    for root in roots:
        for folder, _, names in os.walk(root):
            for name in names:
                path = Path(folder) / name
                if path.is_file() and not path.is_symlink() and os.access(path, os.R_OK):
                    groups.setdefault(path.suffix.lower() or "no suffix", []).append(path)
    rng = np.random.default_rng(seed)
    kinds = [str(kind) for kind in rng.permutation(sorted(groups))]
    pools = {kind: [str(p) for p in rng.permutation(sorted(groups[kind]))] for kind in kinds}
    chosen: list[Path] = []
    while len(chosen) < count and any(pools.values()):
        for pool in pools.values():
            while pool and len(chosen) < count:
                path = Path(pool.pop())
                if path.stat().st_size >= smallest:
                    chosen.append(path)
                    break
    return chosen


def file_ends(path: Path, block: int = 4096) -> bytes:
    """The first and last ``block`` bytes of ``path`` (the whole file when it is smaller)."""
    size = path.stat().st_size
    with path.open("rb") as handle:
        if size <= 2 * block:
            return handle.read()
        head = handle.read(block)
        handle.seek(size - block)
        return head + handle.read(block)
