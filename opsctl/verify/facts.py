"""The release facts verify checks against: kept in opsctl.config.releasefacts, where a profile's
load checks its variants' `expect:` keys against them (the config layer cannot import a room);
re-exported here, verify's name for them."""

from opsctl.config.releasefacts import (
    VERSION_KEY,
    ByKv,
    Default,
    Depends,
    Endpoint,
    FieldFact,
    Fixed,
    Required,
    SameAs,
    Value,
    facts_for,
)

__all__ = ["VERSION_KEY", "ByKv", "Default", "Depends", "Endpoint", "FieldFact",
           "Fixed", "Required", "SameAs", "Value", "facts_for"]
