"""Apache Hudi's DynamoDB lock (``DynamoDBBasedLockProvider``), taken by its protocol so that our
commits and Hudi's writers exclude each other on a table on S3.

Hudi 0.15's provider is Amazon's DynamoDB lock client (``dynamodb-lock-client`` 1.2) over one
DynamoDB table (``hoodie.write.lock.dynamodb.table``; created on first use with one string hash
key named ``key``, billed per request unless ``billing_mode`` says otherwise). A Hudi table's lock
is the item whose ``key`` is ``hoodie.write.lock.dynamodb.partition_key`` (default: the table's
name). Its holder is whoever wrote that item; the item says, as strings, ``ownerName``,
``leaseDuration`` (milliseconds) and ``recordVersionNumber`` (a fresh UUID at each write). The
protocol, as the lock client runs it:

- **acquire**: read the item (consistently). None there: put one, on the condition that none
  exists. One there: the holder is alive as long as it keeps writing a new record version number
  (its heartbeat, every third of its lease); a waiter that sees the *same* number for the item's
  whole ``leaseDuration``, measured on its own clock, takes the lock over with a put conditioned
  on that number. Clocks are never compared across hosts.
- **heartbeat**: update the record version number (and lease), on the condition that the item is
  still this owner's with the number it last wrote.
- **release**: delete the item, on the same condition (Hudi's client deletes on release).

Hudi's lease is ``hoodie.write.lock.wait_time_ms`` (60 s); ours is ``indexer.lock.lease_ms``, and
each side waits out the lease the holder wrote. Access goes through botocore (installed with
s3fs): the region, an endpoint override (``endpoint_url``, for moto or DynamoDB Local) and
credentials from Hudi's ``hoodie.aws.*`` keys, else botocore's default chain.
"""

from __future__ import annotations

import threading
import time
import uuid
from dataclasses import dataclass
from typing import Any

from timeline.errors import ConfigError
from timeline.locks.base import DEFAULT_LEASE_SECONDS, Lease, LockProvider

#: Hudi's class name in ``hoodie.write.lock.provider`` for this protocol
HUDI_DYNAMODB_PROVIDER_CLASS = "org.apache.hudi.aws.transaction.lock.DynamoDBBasedLockProvider"

# the lock client's attribute names (Hudi creates the table with the hash key "key")
PARTITION_KEY = "key"
OWNER = "ownerName"
LEASE = "leaseDuration"
VERSION = "recordVersionNumber"
RELEASED = "isReleased"

_HELD_BY_OWNER = "attribute_exists(#pk) AND #owner = :owner AND #rvn = :rvn"


@dataclass(frozen=True)
class DynamoDBLockSettings:
    """Where the lock lives and how to reach it: Hudi's ``hoodie.write.lock.dynamodb.*`` and
    ``hoodie.aws.*`` keys."""

    table: str
    partition_key: str
    region: str = "us-east-1"
    endpoint_url: str = ""
    billing_mode: str = "PAY_PER_REQUEST"
    read_capacity: int = 20
    write_capacity: int = 10
    table_creation_timeout_seconds: float = 120.0
    access_key: str = ""
    secret_key: str = ""
    session_token: str = ""

    def __post_init__(self) -> None:
        if not self.table:
            raise ConfigError(
                "hoodie.write.lock.dynamodb.table",
                "the DynamoDB table of the lock is required with Hudi's DynamoDBBasedLockProvider "
                "(the same one Hudi's writers are configured with)",
            )
        if not self.partition_key:
            raise ConfigError(
                "hoodie.write.lock.dynamodb.partition_key",
                "the lock's partition key is required (Hudi's default, the table's name, is unknown)",
            )
        if self.billing_mode not in ("PAY_PER_REQUEST", "PROVISIONED"):
            raise ConfigError(
                "hoodie.write.lock.dynamodb.billing_mode",
                f"{self.billing_mode!r}: use PAY_PER_REQUEST or PROVISIONED",
            )


def _conditional_failure(error: Exception) -> bool:
    return _error_code(error) == "ConditionalCheckFailedException"


def _error_code(error: Exception) -> str:
    response = getattr(error, "response", None)
    if isinstance(response, dict):
        return str(response.get("Error", {}).get("Code", ""))
    return ""


class HudiDynamoDBLockProvider(LockProvider):
    """One DynamoDB item shared with Apache Hudi's writers; every lock name maps to it (Hudi has
    one lock per table)."""

    def __init__(
        self,
        settings: DynamoDBLockSettings,
        lease_seconds: float = DEFAULT_LEASE_SECONDS,
        client: Any = None,
    ) -> None:
        super().__init__(lease_seconds)
        self.settings = settings
        self._client = client
        self._table_ready = False
        self._guard = threading.Lock()
        #: the record version number each lease of ours last wrote (by token), and one a
        #: heartbeat wrote whose answer was lost (it may be the item's now)
        self._versions: dict[str, str] = {}
        self._unconfirmed: dict[str, str] = {}
        #: the holder's record version number as first seen by this provider, and when
        self._seen: tuple[str, float] | None = None

    def __repr__(self) -> str:
        s = self.settings
        return f"HudiDynamoDBLockProvider(table={s.table!r}, key={s.partition_key!r})"

    # -- DynamoDB -----------------------------------------------------------------------------

    @property
    def client(self) -> Any:
        if self._client is None:
            import botocore.config
            import botocore.session

            s = self.settings
            credentials: dict[str, str] = {}
            if s.access_key and s.secret_key:
                credentials = {
                    "aws_access_key_id": s.access_key,
                    "aws_secret_access_key": s.secret_key,
                }
                if s.session_token:
                    credentials["aws_session_token"] = s.session_token
            self._client = botocore.session.get_session().create_client(
                "dynamodb",
                region_name=s.region,
                endpoint_url=s.endpoint_url or None,
                config=botocore.config.Config(
                    connect_timeout=5, read_timeout=10, retries={"max_attempts": 3}
                ),
                **credentials,
            )
        return self._client

    def _key(self) -> dict[str, Any]:
        return {PARTITION_KEY: {"S": self.settings.partition_key}}

    def _ensure_table(self) -> None:
        """Create the lock table as Hudi does when it is missing, and wait until it is active."""
        if self._table_ready:
            return
        s, client = self.settings, self.client
        deadline = time.monotonic() + s.table_creation_timeout_seconds
        try:
            status = client.describe_table(TableName=s.table)["Table"]["TableStatus"]
        except Exception as e:
            if _error_code(e) != "ResourceNotFoundException":
                raise
            request: dict[str, Any] = {
                "TableName": s.table,
                "KeySchema": [{"AttributeName": PARTITION_KEY, "KeyType": "HASH"}],
                "AttributeDefinitions": [{"AttributeName": PARTITION_KEY, "AttributeType": "S"}],
                "BillingMode": s.billing_mode,
            }
            if s.billing_mode == "PROVISIONED":
                request["ProvisionedThroughput"] = {
                    "ReadCapacityUnits": s.read_capacity,
                    "WriteCapacityUnits": s.write_capacity,
                }
            try:
                client.create_table(**request)
            except Exception as created:
                if _error_code(created) != "ResourceInUseException":  # someone else created it
                    raise
            status = "CREATING"
        while status != "ACTIVE":
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"DynamoDB lock table {s.table!r} not active after "
                    f"{s.table_creation_timeout_seconds:.0f} s (status {status})"
                )
            time.sleep(0.5)
            status = client.describe_table(TableName=s.table)["Table"]["TableStatus"]
        self._table_ready = True

    def _item(self) -> dict[str, Any] | None:
        self._ensure_table()
        answer = self.client.get_item(
            TableName=self.settings.table, Key=self._key(), ConsistentRead=True
        )
        item = answer.get("Item")
        return item if item else None

    def _put(self, owner: str, version: str, condition: str, values: dict[str, Any]) -> bool:
        item = {
            **self._key(),
            OWNER: {"S": owner},
            LEASE: {"S": str(round(self.lease_seconds * 1000))},
            VERSION: {"S": version},
        }
        names = {"#pk": PARTITION_KEY}
        if ":rvn" in values:
            names["#rvn"] = VERSION
        if ":released" in values:
            names["#released"] = RELEASED
        extra: dict[str, Any] = {"ExpressionAttributeValues": values} if values else {}
        try:
            self.client.put_item(
                TableName=self.settings.table,
                Item=item,
                ConditionExpression=condition,
                ExpressionAttributeNames=names,
                **extra,
            )
        except Exception as e:
            if _conditional_failure(e):
                return False
            raise
        return True

    # -- the provider API ----------------------------------------------------------------------

    def try_acquire(self, name: str, owner: str, token: str) -> Lease | None:
        item = self._item()
        version = uuid.uuid4().hex
        if item is None:
            taken = self._put(owner, version, "attribute_not_exists(#pk)", {})
        elif item.get(RELEASED, {}).get("BOOL"):  # released, kept (not Hudi's way, but legal)
            taken = self._put(
                owner,
                version,
                "attribute_exists(#pk) AND #released = :released",
                {":released": {"BOOL": True}},
            )
        else:
            held = item.get(VERSION, {}).get("S", "")
            lease_ms = float(item.get(LEASE, {}).get("S", "0") or 0)
            now = time.monotonic()
            with self._guard:
                if self._seen is None or self._seen[0] != held:
                    self._seen = (held, now)  # alive (or new to us): wait out its lease anew
                    return None
                if now - self._seen[1] < lease_ms / 1000:
                    return None
            # no heartbeat for the holder's whole lease: take it over, if still unchanged
            taken = self._put(
                owner, version, "attribute_exists(#pk) AND #rvn = :rvn", {":rvn": {"S": held}}
            )
        if not taken:
            return None
        with self._guard:
            self._versions[token] = version
            self._seen = None
        return Lease(name, owner, token, time.time_ns())

    def _conditional(self, lease: Lease, version: str) -> dict[str, Any]:
        return {
            "ConditionExpression": _HELD_BY_OWNER,
            "ExpressionAttributeNames": {"#pk": PARTITION_KEY, "#owner": OWNER, "#rvn": VERSION},
            "ExpressionAttributeValues": {":owner": {"S": lease.owner}, ":rvn": {"S": version}},
        }

    def renew(self, lease: Lease) -> bool:
        with self._guard:
            current = self._versions.get(lease.token)
            unconfirmed = self._unconfirmed.pop(lease.token, None)
        if current is None:
            return False
        for version in (current, unconfirmed):
            if version is None:
                continue
            fresh = uuid.uuid4().hex
            request = self._conditional(lease, version)
            request["ExpressionAttributeNames"]["#lease"] = LEASE
            request["ExpressionAttributeValues"][":fresh"] = {"S": fresh}
            request["ExpressionAttributeValues"][":lease"] = {
                "S": str(round(self.lease_seconds * 1000))
            }
            try:
                self.client.update_item(
                    TableName=self.settings.table,
                    Key=self._key(),
                    UpdateExpression="SET #rvn = :fresh, #lease = :lease",
                    **request,
                )
            except Exception as e:
                if _conditional_failure(e):
                    continue  # not this version: perhaps the unconfirmed one is the item's
                with self._guard:  # the answer was lost: the write may have happened
                    self._unconfirmed[lease.token] = fresh
                raise
            with self._guard:
                self._versions[lease.token] = fresh
            return True
        with self._guard:
            self._versions.pop(lease.token, None)
        return False

    def release(self, lease: Lease) -> None:
        with self._guard:
            versions = [self._versions.pop(lease.token, None)]
            versions.append(self._unconfirmed.pop(lease.token, None))
        for version in versions:
            if version is None:
                continue
            try:
                self.client.delete_item(
                    TableName=self.settings.table,
                    Key=self._key(),
                    **self._conditional(lease, version),
                )
                return
            except Exception as e:
                if not _conditional_failure(e):
                    raise
        # no longer ours (taken over after our lease ran out): nothing to release

    def holder(self, name: str) -> str | None:
        item = self._item()
        if item is None or item.get(RELEASED, {}).get("BOOL"):
            return None
        owner = item.get(OWNER, {}).get("S", "?")
        s = self.settings
        return f"{owner} (DynamoDB table {s.table!r}, key {s.partition_key!r})"

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None
