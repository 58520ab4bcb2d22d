"""Split an expression into tokens: numbers, operators and parentheses."""

from collections import namedtuple

Token = namedtuple("Token", "kind value pos")

OPERATORS = "+-*/%^"


class TokenizeError(ValueError):
    pass


def tokenize(text):
    """Return the list of tokens of `text`, ending with an `end` token."""
    tokens = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch.isspace():
            i += 1
        elif ch.isdigit() or ch == ".":
            start = i
            while i < len(text) and (text[i].isdigit() or text[i] == "."):
                i += 1
            literal = text[start:i]
            try:
                value = float(literal) if "." in literal else int(literal)
            except ValueError:
                raise TokenizeError(f"bad number {literal!r} at {start}") from None
            tokens.append(Token("num", value, start))
        elif ch in OPERATORS:
            tokens.append(Token("op", ch, i))
            i += 1
        elif ch in "()":
            tokens.append(Token("paren", ch, i))
            i += 1
        else:
            raise TokenizeError(f"unexpected character {ch!r} at {i}")
    tokens.append(Token("end", None, len(text)))
    return tokens
