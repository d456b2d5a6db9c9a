"""`aksgpu prices refresh` against a local stand-in for the Azure Retail Prices API: pages shaped
as the API documents them (the sample items are Microsoft Learn's, verbatim, plus one captured
Linux item), NextPageLink paging, and Windows, reservation, dev/test and Low Priority rows that
must not be taken for Linux prices."""

from __future__ import annotations

import copy
import datetime
import http.server
import json
import threading
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from aksgpu.cli.app import app
from aksgpu.preflight import retail_prices
from aksgpu.preflight.prices import read_table, shipped_table

runner = CliRunner()

# Microsoft Learn, "Azure Retail Prices overview" (source markdown, ms.date 09/27/2021), verbatim.
WINDOWS_SPOT_DEVTEST = {
    "currencyCode": "USD", "tierMinimumUnits": 0.0, "retailPrice": 0.176346, "unitPrice": 0.176346,
    "armRegionName": "westeurope", "location": "EU West", "effectiveStartDate": "2020-08-01T00:00:00Z",
    "meterId": "000a794b-bdb0-58be-a0cd-0c3a0f222923", "meterName": "F16s Spot", "productId": "DZH318Z0BQPS",
    "skuId": "DZH318Z0BQPS/00TG", "productName": "Virtual Machines FS Series Windows", "skuName": "F16s Spot",
    "serviceName": "Virtual Machines", "serviceId": "DZH313Z7MMC8", "serviceFamily": "Compute",
    "unitOfMeasure": "1 Hour", "type": "DevTestConsumption", "isPrimaryMeterRegion": True,
    "armSkuName": "Standard_F16s"}
LINUX_RESERVATION = {
    "currencyCode": "USD", "tierMinimumUnits": 0.0, "reservationTerm": "1 Year", "retailPrice": 25007.0,
    "unitPrice": 25007.0, "armRegionName": "southcentralus", "location": "US South Central",
    "effectiveStartDate": "2020-08-01T00:00:00Z", "meterId": "0016083a-928f-56fd-8eeb-39287dcf676d",
    "meterName": "E64 v4", "productId": "DZH318Z0D1L7", "skuId": "DZH318Z0D1L7/018J",
    "productName": "Virtual Machines Ev4 Series", "skuName": "E64 v4", "serviceName": "Virtual Machines",
    "serviceId": "DZH313Z7MMC8", "serviceFamily": "Compute", "unitOfMeasure": "1 Hour", "type": "Reservation",
    "isPrimaryMeterRegion": True, "armSkuName": "Standard_E64_v4"}
# A captured Linux pay-as-you-go item with savingsPlan (the preview api-version's shape).
LINUX_PAYG = {
    "currencyCode": "USD", "tierMinimumUnits": 0.0, "retailPrice": 0.673, "unitPrice": 0.673,
    "armRegionName": "australiacentral", "location": "AU Central", "effectiveStartDate": "2023-09-01T00:00:00Z",
    "meterId": "25385797-d48b-5b47-9e0c-6ee37b6b9a8d", "meterName": "B16als v2", "productId": "DZH318Z0K9JH",
    "skuId": "DZH318Z0K9JH/00QW", "productName": "Virtual Machines Basv2 Series", "skuName": "B16als v2",
    "serviceName": "Virtual Machines", "serviceId": "DZH313Z7MMC8", "serviceFamily": "Compute",
    "unitOfMeasure": "1 Hour", "type": "Consumption", "isPrimaryMeterRegion": True,
    "armSkuName": "Standard_B16als_v2",
    "savingsPlan": [{"unitPrice": 0.34323, "retailPrice": 0.34323, "term": "3 Years"},
                    {"unitPrice": 0.49129, "retailPrice": 0.49129, "term": "1 Year"}]}


def _like(item: dict[str, Any], **changes: Any) -> dict[str, Any]:
    return {**copy.deepcopy(item), "armRegionName": "eastus", "location": "US East", **changes}


A100 = dict(armSkuName="Standard_NC24ads_A100_v4", meterName="NC24ads A100 v4", skuName="NC24ads A100 v4",
            productName="Virtual Machines NCadsA100v4 Series")
PAGES = [
    [_like(LINUX_PAYG, unitPrice=3.5, retailPrice=3.5, **A100),
     # The same size on Windows ("Srs Win", as some H100 series say) and a Windows spot meter.
     _like(LINUX_PAYG, unitPrice=9.9, **{**A100, "productName": "Virtual Machines NCadsA100v4 Srs Win"}),
     _like(WINDOWS_SPOT_DEVTEST, type="Consumption", unitPrice=0.9, armSkuName="Standard_NC24ads_A100_v4",
           skuName="NC24ads A100 v4 Spot", meterName="NC24ads A100 v4 Spot",
           productName="Virtual Machines NCadsA100v4 Series Windows"),
     _like(LINUX_RESERVATION)],
    [_like(LINUX_PAYG, unitPrice=0.4, **{**A100, "skuName": "NC24ads A100 v4 Spot",
                                          "meterName": "NC24ads A100 v4 Spot"}),
     _like(LINUX_PAYG, unitPrice=0.3, **{**A100, "skuName": "NC24ads A100 v4 Low Priority"}),
     _like(WINDOWS_SPOT_DEVTEST),
     _like(LINUX_PAYG)],
]


class _Api(http.server.BaseHTTPRequestHandler):
    requests: list[dict[str, list[str]]] = []

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        query = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query)
        type(self).requests.append(query)
        region = query["$filter"][0].split("armRegionName eq '")[1].split("'")[0]
        skip = int(query.get("$skip", ["0"])[0])
        page = skip // 100
        items = PAGES[page] if region == "eastus" else []
        more = region == "eastus" and page + 1 < len(PAGES)
        base = f"http://127.0.0.1:{self.server.server_port}/api/retail/prices"
        next_link = f"{base}?{urllib.parse.urlencode({'$filter': query['$filter'][0], '$skip': skip + 100})}"
        body = json.dumps({"BillingCurrency": "USD", "CustomerEntityId": "Default", "CustomerEntityType": "Retail",
                           "Items": items, "NextPageLink": next_link if more else None, "Count": len(items)})
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(body.encode())

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def api(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Api)
    # serve_forever polls for shutdown every 0.5 s by default: each test would wait that long at its end.
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    _Api.requests = []
    url = f"http://127.0.0.1:{server.server_port}/api/retail/prices"
    monkeypatch.setenv(retail_prices.URL_VARIABLE, url)
    yield url
    server.shutdown()
    server.server_close()


def test_linux_on_demand_and_spot_are_told_from_windows_reservations_and_low_priority(api: str) -> None:
    rows = retail_prices.vm_rows(retail_prices.fetch_items("eastus", api))
    assert rows["Standard_NC24ads_A100_v4"] == {"onDemand": 3.5, "spot": 0.4, "source": "retail-prices-api"}
    assert rows["Standard_B16als_v2"] == {"onDemand": 0.673, "spot": None, "source": "retail-prices-api"}
    assert set(rows) == {"Standard_NC24ads_A100_v4", "Standard_B16als_v2"}, "no Windows, reservation or dev/test"
    assert len(_Api.requests) == 2, "both pages were read"
    assert _Api.requests[0]["$filter"] == ["serviceName eq 'Virtual Machines' and armRegionName eq 'eastus' "
                                           "and priceType eq 'Consumption'"]


def test_refresh_writes_a_dated_table_the_estimate_then_uses(project: Path, api: str) -> None:
    result = runner.invoke(app, ["prices", "refresh", "--region", "eastus"])
    assert result.exit_code == 0, result.output
    written = project / "stacks" / "prices.yaml"
    assert f"wrote {written}: 2 VM prices in eastus" in result.output
    table = read_table(written)
    today = datetime.date.today()
    assert table.date == today.isoformat()
    assert table.vm("Standard_NC24ads_A100_v4", "eastus").spot == 0.4
    assert table.source("retail-prices-api")["retrieved"] == today
    assert table.vm("Standard_D8ds_v5", "eastus2") == shipped_table().vm("Standard_D8ds_v5", "eastus2"), \
        "regions not fetched keep their rows"
    assert table.raw["fixed"] == shipped_table().raw["fixed"]
    cost = runner.invoke(app, ["cost", "dev", "--json"])
    assert json.loads(cost.output)["priceTable"]["date"] == today.isoformat()
    again = runner.invoke(app, ["prices", "refresh", "--region", "eastus"])
    assert again.exit_code == 0, "a table aksgpu wrote may be replaced"


def test_refresh_never_replaces_a_file_that_is_not_a_price_table(tmp_path: Path, api: str) -> None:
    mine = tmp_path / "notes.yaml"
    mine.write_text("my: notes\n")
    result = runner.invoke(app, ["prices", "refresh", "-r", "eastus", "--output", str(mine)])
    assert result.exit_code == 2 and "is not an aksgpu price table" in result.output
    assert mine.read_text() == "my: notes\n"
    forced = runner.invoke(app, ["prices", "refresh", "-r", "eastus", "--output", str(mine), "--force"])
    assert forced.exit_code == 0 and yaml.safe_load(mine.read_text())["kind"] == "aksgpu-prices"


def test_a_region_the_api_does_not_know_writes_nothing(tmp_path: Path, api: str) -> None:
    result = runner.invoke(app, ["prices", "refresh", "-r", "westmars", "-o", str(tmp_path / "p.yaml")])
    assert result.exit_code == 2 and "no Linux VM prices for westmars" in result.output
    assert not (tmp_path / "p.yaml").exists()


def test_offline_is_one_clear_line_with_the_table_date(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(retail_prices.URL_VARIABLE, "http://127.0.0.1:9/api/retail/prices")  # discard: refused
    result = runner.invoke(app, ["prices", "refresh", "-o", str(tmp_path / "p.yaml")])
    assert result.exit_code == 1
    assert result.output.startswith("error: cannot read http://127.0.0.1:9/api/retail/prices")
    assert f"price table of {shipped_table().date}, shipped with aksgpu" in result.output
    assert "Traceback" not in result.output and not (tmp_path / "p.yaml").exists()


def test_a_next_page_on_another_host_is_not_followed() -> None:
    class _Response:
        def __init__(self, body: dict[str, Any]) -> None:
            self.body = json.dumps(body).encode()

        def __enter__(self) -> Any:
            import io

            return io.BytesIO(self.body)

        def __exit__(self, *args: Any) -> None:
            pass

    def opener(url: str, timeout: float) -> Any:
        return _Response({"Items": [], "NextPageLink": "https://elsewhere.example/api/retail/prices?$skip=100"})

    with pytest.raises(retail_prices.RetailPricesError, match="another host"):
        list(retail_prices.fetch_items("eastus", "https://prices.azure.com/api/retail/prices", opener))
