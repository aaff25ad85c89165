/*
 * test_data_frame.c — a message's {data} frame (qim__gw_data_frame, shared by live delivery
 * and {get what:"data"}): a Tinode payload's head and content go out exactly as stored, no
 * head key without one; a qim client's opaque bytes as base64 with their type as the mime;
 * a wiped body as content null; a stored payload that cannot be read gives no frame.
 */
#include <jansson.h>
#include <string.h>

#include "gateway/gateway_int.h"
#include "qim/mem.h"
#include "qim/payload.h"
#include "testsupport.h"

static const qim_proto_data_frame base = {.topic = "grpTOPIC", .from = "usrFROM", .ts_ms = 1700000000123ull, .seq = 7};

static json_t *frame_of(qim_message_content *c) {
  size_t len;
  char *s = qim__gw_data_frame(&base, c, &len);
  if (!s) return NULL;
  assert_int_equal(strlen(s), len);
  json_t *j = json_loadb(s, len, JSON_REJECT_DUPLICATES, NULL);
  qim_free(s);
  assert_non_null(j);
  json_t *d = json_incref(json_object_get(j, "data"));
  json_decref(j);
  assert_non_null(d);
  assert_string_equal(json_string_value(json_object_get(d, "topic")), "grpTOPIC");
  assert_string_equal(json_string_value(json_object_get(d, "from")), "usrFROM");
  assert_string_equal(json_string_value(json_object_get(d, "ts")), "2023-11-14T22:13:20.123Z");
  assert_int_equal(json_integer_value(json_object_get(d, "seq")), 7);
  return d;
}

static qim_message_content content(uint32_t schema, const char *payload) {
  qim_message_content c = {.message_type = QIM_MESSAGE_TYPE_TEXT, .schema_version = schema};
  c.payload_or_ciphertext = (qim_bytes){(uint8_t *)payload, strlen(payload)};
  return c;
}

static void assert_json(const json_t *got, const char *want) {
  json_t *w = json_loads(want, JSON_DECODE_ANY, NULL);
  assert_non_null(w);
  assert_true(json_equal(got, w));
  json_decref(w);
}

static void test_a_tinode_payload_goes_out_as_stored(void **state) {
  (void)state;
  qim_message_content c = content(QIM_PAYLOAD_SCHEMA_TINODE,
                                  "{\"content\":{\"ent\":[{\"tp\":\"MN\"}],\"txt\":\"a\\\"}\"},"
                                  "\"head\":{\"mime\":\"text/x-drafty\",\"reply\":\":3\"}}");
  json_t *d = frame_of(&c);
  assert_json(json_object_get(d, "content"), "{\"ent\":[{\"tp\":\"MN\"}],\"txt\":\"a\\\"}\"}");
  assert_json(json_object_get(d, "head"), "{\"mime\":\"text/x-drafty\",\"reply\":\":3\"}");
  json_decref(d);
  c = content(QIM_PAYLOAD_SCHEMA_TINODE, "{\"content\":\"hi\"}");
  d = frame_of(&c);
  assert_string_equal(json_string_value(json_object_get(d, "content")), "hi");
  assert_null(json_object_get(d, "head"));
  json_decref(d);
  /* not in the canonical form (spaces, other key order), still readable: parsed instead */
  c = content(QIM_PAYLOAD_SCHEMA_TINODE, "{ \"head\": {\"mime\": \"text/plain\"}, \"content\": \"hi\" }");
  d = frame_of(&c);
  assert_string_equal(json_string_value(json_object_get(d, "content")), "hi");
  assert_json(json_object_get(d, "head"), "{\"mime\":\"text/plain\"}");
  json_decref(d);
}

static void test_opaque_wiped_and_unreadable_bodies(void **state) {
  (void)state;
  qim_message_content c = content(0, "\x01\x02\x03");
  c.custom_type = "application/x-qim-e2e";
  json_t *d = frame_of(&c);
  assert_string_equal(json_string_value(json_object_get(d, "content")), "AQID");
  assert_json(json_object_get(d, "head"), "{\"mime\":\"application/x-qim-e2e\"}");
  json_decref(d);
  c = content(QIM_PAYLOAD_SCHEMA_TINODE, "");
  d = frame_of(&c);
  assert_true(json_is_null(json_object_get(d, "content")));
  json_decref(d);
  c = content(QIM_PAYLOAD_SCHEMA_TINODE, "{\"head\":1");
  assert_null(frame_of(&c));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_a_tinode_payload_goes_out_as_stored),
      cmocka_unit_test(test_opaque_wiped_and_unreadable_bodies),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
