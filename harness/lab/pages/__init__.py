"""The lab's pages, one module per page (or family of pages): each handler takes the LabContext first
(harness.lab.context), then the request; harness.lab.app binds the context and lists the routes."""
