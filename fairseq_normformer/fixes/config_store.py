"""hydra 1.3's composition copies the whole ConfigStore (fix ``config_store_copy``, fixes/__init__.py)."""
from hydra.core.config_store import ConfigStore


def the_store_itself(store: ConfigStore, memo: dict) -> ConfigStore:
    """``copy.deepcopy`` of hydra's ConfigStore, the singleton (``ConfigStore.instance()``) that holds every config
    fairseq registers: the store itself. hydra's CachingConfigRepository deep-copies its repository at each
    composition, and with it the store its source of structured configs holds (hydra's main branch reads
    ``ConfigStore.instance()`` there instead: hydra PR 2928). The store's ``load`` deep-copies what it returns, so
    no composition can change it."""
    return store
