"""``$(VAR)`` expansion as the kubelet does it to a container's env, command and args.

The syntax and its corner cases come from Kubernetes' expansion design (the
table of cases in docs/links.md) and from the kubelet's implementation
(``third_party/forked/golang/expansion``), written here anew:

* ``$(NAME)`` is replaced by the value of ``NAME`` when the mapping knows it;
  otherwise it stays in the output exactly as written, ``$(NAME)``;
* ``$$`` is an escaped ``$``: one ``$`` out, and the next character is not an
  operator (``$$(A)`` gives ``$(A)``);
* a ``$`` followed by anything else, or by ``(`` with no ``)`` after it
  (an unclosed reference), stays as written and expansion goes on right after
  the ``$`` (so ``$(A$(B)`` looks up the name ``A$(B``);
* a ``$`` at the very end stays;
* the name is everything between ``(`` and the first ``)``; nothing is nested.

One difference from old kubelets: the input is a string of characters, not of
bytes, so ``$`` before a multi-byte character keeps the character whole, as
kubelets do since the fix for invalid UTF-8 in 1.34 (their older byte-wise
code garbled it).

Which names a mapping knows is the caller's business; for a container's env
the kubelet lets a value refer only to variables defined before it (see
:func:`links.inject`), and command and args to all of them.
"""

from collections.abc import Callable

Lookup = Callable[[str], str | None]
"""Maps a variable name to its value, or ``None`` when it is not defined."""

OPERATOR = "$"
OPENER = "("
CLOSER = ")"


def expand(text: str, lookup: Lookup) -> str:
    """``text`` with its ``$(NAME)`` references replaced through ``lookup``.

    Unknown names, unclosed references and lone ``$`` stay as written; ``$$``
    becomes ``$``. Never raises. Source: Kubernetes' expansion design.
    """
    out: list[str] = []
    checkpoint = 0
    cursor = 0
    end = len(text)
    while cursor < end:
        if text[cursor] != OPERATOR or cursor + 1 == end:
            cursor += 1
            continue
        out.append(text[checkpoint:cursor])
        following = text[cursor + 1]
        if following == OPERATOR:  # escaped operator
            out.append(OPERATOR)
            cursor += 2
        elif following == OPENER and (close := text.find(CLOSER, cursor + 2)) != -1:
            name = text[cursor + 2:close]
            value = lookup(name)
            out.append(f"{OPERATOR}{OPENER}{name}{CLOSER}" if value is None else value)
            cursor = close + 1
        else:  # a lone operator, or an unclosed reference: kept, and scanning goes on after the `$(`/`$x`
            out.append(text[cursor:cursor + 2])
            cursor += 2
        checkpoint = cursor
    out.append(text[checkpoint:])
    return "".join(out)


def references(text: str) -> list[str]:
    """The names ``text`` refers to with ``$(NAME)``, in order (escaped ones left out)."""
    names: list[str] = []
    expand(text, names.append)  # append returns None: every reference stays unexpanded
    return names
