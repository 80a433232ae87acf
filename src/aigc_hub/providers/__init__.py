"""Outside systems the hub ships for local use (today: the local provider simulator).

Each stands where a vendor's service would: it imports only the backbone, never a pipeline,
and a pipeline talks to it over its adapter's protocol (HTTP), as it would to the vendor.
"""
