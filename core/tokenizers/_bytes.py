"""The byte-level alphabet: one printable char for each of the 256 byte values."""


def _byte_chars():
    printable = list(range(0x21, 0x7F)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    table = {}
    extra = 0
    for b in range(256):
        if b in printable:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


BYTE_TO_CHAR = _byte_chars()
CHAR_TO_BYTE = {c: b for b, c in BYTE_TO_CHAR.items()}
# str.translate table from latin-1 decoded bytes to the byte-level alphabet
_LATIN1_TO_BYTE_CHAR = dict(BYTE_TO_CHAR)


def utf8_len(ch):
    cp = ord(ch)
    return 1 if cp < 0x80 else 2 if cp < 0x800 else 3 if cp < 0x10000 else 4


def bytes_to_chars(text):
    """The byte-level rendering of `text`."""
    return text.encode("utf-8", "surrogatepass").decode("latin-1").translate(_LATIN1_TO_BYTE_CHAR)


def to_byte_chars(ns):
    """Rewrite a NormalizedString into the byte-level alphabet, each byte char
    aligned with the char it comes from."""
    t = ns.text
    new = bytes_to_chars(t)
    if len(new) == len(t):
        ns.set_same_length(new)
        return
    al = ns.aligns()
    new_align = []
    for ch, a in zip(t, al, strict=True):
        n = utf8_len(ch)
        if n == 1:
            new_align.append(a)
        else:
            new_align.extend([a] * n)
    ns.text = new
    ns.align = new_align
