"""A fresh VM price table from the Azure Retail Prices API (unauthenticated, public).

GET https://prices.azure.com/api/retail/prices?$filter=serviceName eq 'Virtual Machines' and
armRegionName eq '<region>' and priceType eq 'Consumption'; at most 100 items a page, the next
page at NextPageLink until it is null (Microsoft Learn, "Azure Retail Prices overview"). Rows are
sorted the way SkyPilot's fetch_azure.py does: Windows rows (productName with ' Win', which also
matches ' Windows' and ' Srs Win') and Cloud Services rows are dropped, and so are Low Priority
meters and prices of 0; a skuName with ' Spot' is the spot price, the rest the pay-as-you-go one.
"""

from __future__ import annotations

import datetime
import json
import os
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

import yaml

from aksgpu.preflight.prices import KIND, PriceTable

API_URL = "https://prices.azure.com/api/retail/prices"
URL_VARIABLE = "AKSGPU_RETAIL_PRICES_URL"  # another endpoint (tests use a local server)
SOURCE_KEY = "retail-prices-api"
NOT_LINUX = (" Win", " Cloud Services", " CloudServices")
MAX_PAGES = 1000


class RetailPricesError(Exception):
    """The API could not be reached or answered something that is not a price page."""


Opener = Callable[[str, float], Any]


def api_url() -> str:
    return os.environ.get(URL_VARIABLE) or API_URL


def region_filter(region: str) -> str:
    return f"serviceName eq 'Virtual Machines' and armRegionName eq '{region}' and priceType eq 'Consumption'"


def _open(url: str, timeout: float) -> Any:
    request = urllib.request.Request(url, headers={"Accept": "application/json", "User-Agent": "aksgpu"})
    return urllib.request.urlopen(request, timeout=timeout)  # noqa: S310 - an https (or test) URL we built


def fetch_items(region: str, base_url: str, opener: Opener = _open, timeout: float = 30) -> Iterator[dict[str, Any]]:
    """Every item of the region's VM consumption prices, page after page."""
    origin = _origin(base_url)
    query = urllib.parse.urlencode({"$filter": region_filter(region)}, quote_via=urllib.parse.quote)
    url: str | None = f"{base_url}?{query}"
    for _ in range(MAX_PAGES):
        if url is None:
            return
        if _origin(url) != origin:  # the API's links name port 443; the scheme and host must stay
            raise RetailPricesError(f"the API pointed to a next page on another host ({url}); stopped")
        try:
            with opener(url, timeout) as response:
                page = json.load(response)
        except (urllib.error.URLError, OSError, ValueError) as error:
            raise RetailPricesError(f"cannot read {url.split('?')[0]}: {getattr(error, 'reason', error)}") from None
        if not isinstance(page, dict) or not isinstance(page.get("Items"), list):
            raise RetailPricesError(f"{url.split('?')[0]} answered something that is not a price page")
        yield from page["Items"]
        url = page.get("NextPageLink") or None
    raise RetailPricesError(f"more than {MAX_PAGES} pages for {region}; stopped")


def _origin(url: str) -> tuple[str, str | None]:
    parts = urllib.parse.urlsplit(url)
    return parts.scheme, parts.hostname


def classify(item: dict[str, Any]) -> tuple[str, str, float] | None:
    """(ARM size, 'onDemand' or 'spot', USD per hour) of a Linux consumption item; None for others."""
    if item.get("type") != "Consumption" or item.get("currencyCode", "USD") != "USD":
        return None
    if item.get("unitOfMeasure") != "1 Hour" or any(word in str(item.get("productName", "")) for word in NOT_LINUX):
        return None
    sku = str(item.get("skuName", ""))
    price = item.get("unitPrice")
    if "Low Priority" in sku or not isinstance(price, int | float) or price <= 0 or not item.get("armSkuName"):
        return None
    return str(item["armSkuName"]), "spot" if " Spot" in sku else "onDemand", float(price)


def vm_rows(items: Iterator[dict[str, Any]] | list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """size -> {onDemand, spot, source}; the newest effectiveStartDate wins where meters repeat."""
    newest: dict[tuple[str, str], tuple[str, float]] = {}
    for item in items:
        found = classify(item)
        if found is None:
            continue
        size, kind, price = found
        start = str(item.get("effectiveStartDate", ""))
        if (size, kind) not in newest or start > newest[(size, kind)][0]:
            newest[(size, kind)] = (start, price)
    sizes = sorted({size for size, _ in newest})
    return {size: {"onDemand": newest.get((size, "onDemand"), ("", None))[1],
                   "spot": newest.get((size, "spot"), ("", None))[1], "source": SOURCE_KEY} for size in sizes}


def refreshed_table(base: PriceTable, fetched: dict[str, dict[str, dict[str, Any]]], base_url: str,
                    today: datetime.date) -> dict[str, Any]:
    """`base` with the fetched regions' VM rows replaced; other regions and the fixed parts keep
    their rows and sources."""
    raw = json.loads(json.dumps(base.raw, default=str))  # a deep copy with dates as text
    raw = _dates(raw)
    raw["retrieved"] = today
    raw["source"] = (f"VM prices of {', '.join(sorted(fetched))} from the Azure Retail Prices API ({base_url}) on "
                     f"{today.isoformat()}; the other rows from the {base.label()}")
    raw["sources"][SOURCE_KEY] = {
        "text": f"Azure Retail Prices API {base_url}, $filter={region_filter('<region>')}: Linux rows (productName "
                "without ' Win' or ' Cloud Services'), unitPrice per hour; spot = a skuName with ' Spot'; fetched by "
                "`aksgpu prices refresh`",
        "retrieved": today, "grade": "A"}
    vm = dict(raw.get("vm") or {})
    vm.update(fetched)
    raw["vm"] = {region: vm[region] for region in sorted(vm)}
    return raw


def _dates(raw: dict[str, Any]) -> dict[str, Any]:
    """The copy's dates back as dates (they were dates in the table read)."""
    raw["retrieved"] = datetime.date.fromisoformat(str(raw["retrieved"]))
    for source in (raw.get("sources") or {}).values():
        source["retrieved"] = datetime.date.fromisoformat(str(source["retrieved"]))
    return raw


def table_text(raw: dict[str, Any]) -> str:
    header = (f"# An aksgpu price table ({KIND}), written by `aksgpu prices refresh` on {raw['retrieved']}.\n"
              "# USD per hour unless a row's unit says otherwise; null: no price. Regenerate it rather than edit it.\n")
    return header + yaml.safe_dump(raw, sort_keys=False, allow_unicode=True, width=200)
