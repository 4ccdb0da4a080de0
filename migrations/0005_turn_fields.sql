-- Fields of an assistant turn a provider requires back on the next request (docs/design.md §2.3:
-- reasoning_details, reasoning_content), kept verbatim as one JSON object; NULL when there are none.
ALTER TABLE messages ADD COLUMN turn_fields TEXT;
