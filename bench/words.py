"""The deterministic vocabulary prompts are built from (pure data, no I/O).

Common short English words: most tokenizers map each (with its leading space) to one or two
tokens, and the run calibrates tokens per word against the server anyway.
"""

from __future__ import annotations

_WORDS_TEXT = """
    time year people way day man thing woman life child world school state family student group
    country problem hand part place case week company system program question work government
    number night point home water room mother area money story fact month lot right study book
    eye job word business issue side kind head house service friend father power hour game line
    end member law car city community name president team minute idea kid body information back
    parent face others level office door health person art war history party result change
    morning reason research girl guy moment air teacher force education foot boy age policy
    process music market sense nation plan college interest death experience effect use class
    control care field development role effort rate heart drug show leader light voice wife
    police mind price report decision son view relationship town road arm difference value
    building action model season society tax director position player record paper space ground
    form event official matter center couple site project activity star table need court oil
    situation cost industry figure street image phone data picture practice piece land product
    doctor wall patient worker news test movie north love support technology step baby computer
    type attention film tree source organization hair window evidence population truth song
    garden river bridge stone cloud green blue quick simple early small large great little old
    young long short high low open close clear full free late hard easy ready strong happy able
    real sure whole public local general
"""

WORDS: tuple[str, ...] = tuple(_WORDS_TEXT.split())
