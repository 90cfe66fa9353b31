"""moto server (DynamoDB + Streams) for the local stack and the tests.

Two changes to how `moto_server` runs, both to behave like DynamoDB:

1. One request at a time. `moto_server` runs werkzeug with threaded=True,
   and moto's DynamoDB backend does not lock around conditional writes, so
   two concurrent conditional updates of one item can both succeed (a lost
   update real DynamoDB never allows). The engine's exactly-once rules rely
   on per-item atomicity.
2. Cheap transactions. moto backs up every table a TransactWriteItems
   touches with copy.deepcopy, and on cancellation replaces the table object
   (which also breaks open stream iterators). With thousands of items that
   costs tens of milliseconds per transaction. Here only the items the
   transaction names are backed up and put back on failure.

Usage: python scripts/moto_server.py HOST PORT
"""

import copy
import os
import sys

from werkzeug.serving import run_simple

import moto.dynamodb.models as dynamodb_models
from moto.dynamodb.models import DynamoDBBackend
from moto.dynamodb.models.dynamo_type import DynamoType
from moto.dynamodb.models.table import Table
from moto.moto_server.werkzeug_app import (
    DomainDispatcherApplication,
    MotoRequestHandler,
    create_backend_app,
)


class _CopyWithoutTables:
    """The `copy` module as moto's transaction code sees it: tables are
    not deep-copied (the items are backed up by `_transact_write_items`)."""

    def __getattr__(self, name):
        return getattr(copy, name)

    @staticmethod
    def deepcopy(value, memo=None):
        if isinstance(value, Table):
            return value
        return copy.deepcopy(value, memo)


_moto_transact_write_items = DynamoDBBackend.transact_write_items


def _transact_write_items(self, transact_items):
    # Restores items only: stream records that operations of a cancelled
    # transaction emitted stay. The engine's transactions touch only tables
    # without streams (activity_exec, workflow_exec).
    backups = []
    for entry in transact_items:
        op = next(iter(entry.values()), {})
        table = self.tables.get(op.get("TableName"))
        key = op.get("Item") or op.get("Key") or {}
        if table is None or table.hash_key_attr not in key:
            continue
        hash_value = DynamoType(key[table.hash_key_attr])
        range_value = None
        if table.range_key_attr is not None:
            if table.range_key_attr not in key:
                continue
            range_value = DynamoType(key[table.range_key_attr])
        item = table.get_item(hash_value, range_value)
        backups.append((table, hash_value, range_value, copy.deepcopy(item)))
    dynamodb_models.copy = _CopyWithoutTables()
    try:
        return _moto_transact_write_items(self, transact_items)
    except Exception:
        for table, hash_value, range_value, item in reversed(backups):
            if range_value is None:
                if item is None:
                    table.items.pop(hash_value, None)
                else:
                    table.items[hash_value] = item
            elif item is None:
                table.items.get(hash_value, {}).pop(range_value, None)
            else:
                table.items[hash_value][range_value] = item
        raise
    finally:
        dynamodb_models.copy = copy


DynamoDBBackend.transact_write_items = _transact_write_items


def main() -> None:
    host, port = sys.argv[1], int(sys.argv[2])
    os.environ.setdefault("MOTO_PORT", str(port))
    app = DomainDispatcherApplication(create_backend_app)
    run_simple(host, port, app, threaded=False, request_handler=MotoRequestHandler)


if __name__ == "__main__":
    main()
