"""Published measurements shipped with shardplan (facts from papers, each record with its source)."""
