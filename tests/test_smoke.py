from helpers import insert_document

from harness.retrieval import retrieve


def test_insert_and_retrieve_with_hash_model(fresh_db):
    insert_document(fresh_db, "a.md", "# Refunds\n\nCustomers may request a refund within 14 days of delivery.")
    insert_document(fresh_db, "b.md", "# Travel\n\nHotel costs are reimbursed up to 600 CNY per night.")
    rows = retrieve(fresh_db, "refund within how many days", k=3)
    assert rows and rows[0]["source"] == "a.md"
    assert rows[0]["lexical_rank"] == 1
