from conftest import insert_document, retrieve


def test_insert_and_retrieve_with_hash_model(kb):
    insert_document(kb, "a.md", "# Refunds\n\nCustomers may request a refund within 14 days of delivery.")
    insert_document(kb, "b.md", "# Travel\n\nHotel costs are reimbursed up to 600 CNY per night.")
    rows = retrieve(kb, "refund within how many days", k=3)
    assert rows and rows[0]["source"] == "a.md"
    assert rows[0]["lexical_rank"] == 1
