"""WebShop's colour normalisation: an option value that contains one of 102 colour words becomes that word.

The word list is WebShop's (MIT licence, see the plugin README); the first word in alphabetical order that occurs as
a substring wins, so ``"violet lavender"`` becomes ``"lavender"``. A non-string value (a synthetic goal's
``(name, value)`` pair) is checked by membership, as the original does, so only a value equal to a colour word
changes it.
"""

from __future__ import annotations

from typing import Any

COLOR_WORDS: tuple[str, ...] = (
    'alabaster', 'apricot', 'aqua', 'ash', 'asphalt', 'azure', 'banana', 'beige', 'black', 'blue', 'blush',
    'bordeaux', 'bronze', 'brown', 'burgundy', 'camel', 'camo', 'caramel', 'champagne', 'charcoal', 'cheetah',
    'chestnut', 'chocolate', 'christmas', 'coffee', 'cognac', 'copper', 'coral', 'cranberry', 'cream', 'crystal',
    'dark', 'denim', 'eggplant', 'elephant', 'espresso', 'fuchsia', 'gold', 'granite', 'grape', 'graphite', 'grass',
    'gray', 'green', 'grey', 'heather', 'indigo', 'ivory', 'ivy', 'khaki', 'lavender', 'lemon', 'leopard', 'light',
    'lilac', 'lime', 'magenta', 'maroon', 'mauve', 'merlot', 'midnight', 'mint', 'mocha', 'multicolor', 'mushroom',
    'mustard', 'natural', 'navy', 'nude', 'olive', 'orange', 'peach', 'pewter', 'pink', 'plum', 'purple', 'rainbow',
    'red', 'rose', 'royal', 'rust', 'sand', 'sapphire', 'seashell', 'silver', 'skull', 'slate', 'steel', 'stone',
    'stonewash', 'sunflower', 'tan', 'taupe', 'teal', 'tiger', 'turquoise', 'violet', 'walnut', 'wheat', 'white',
    'wine', 'yellow',
)


def normalize_color(value: Any) -> Any:
    for word in COLOR_WORDS:
        if word in value:
            return word
    return value
