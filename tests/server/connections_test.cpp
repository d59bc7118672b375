// When a parked connection goes to a worker (server/connections.h): once its request head has ended
// and, for a Content-Length body of at most kParkedBodyMax, the body is there; at once for what a
// worker must read or answer itself (chunked bodies, Expect: 100-continue, larger or malformed
// lengths, heads that never end). The socket-level behaviour is tests/server/test_connections.py.
#include <gtest/gtest.h>

#include <string>

#include "server/connections.h"

using graft::server::HttpServer;
using graft::server::request_has_arrived;

TEST(RequestHasArrived, WaitsForTheWholeHead) {
  EXPECT_FALSE(request_has_arrived(""));
  EXPECT_FALSE(request_has_arrived("GET /health HT"));
  EXPECT_FALSE(request_has_arrived("GET /health HTTP/1.1\r\nHost: x\r\n"));
  EXPECT_TRUE(request_has_arrived("GET /health HTTP/1.1\r\nHost: x\r\n\r\n"));
  EXPECT_TRUE(request_has_arrived("GET /health HTTP/1.1\nHost: x\n\n"));  // bare LF, as httplib reads it
}

TEST(RequestHasArrived, WaitsForADeclaredBody) {
  const std::string head = "POST /completion HTTP/1.1\r\nHost: x\r\ncontent-LENGTH: 5\r\n\r\n";
  EXPECT_FALSE(request_has_arrived(head));
  EXPECT_FALSE(request_has_arrived(head + "abcd"));
  EXPECT_TRUE(request_has_arrived(head + "abcde"));
  EXPECT_TRUE(request_has_arrived(head + "abcdeGET / HT"));  // a pipelined next request's start
  EXPECT_TRUE(request_has_arrived("POST / HTTP/1.1\r\nContent-Length: 0\r\n\r\n"));
}

TEST(RequestHasArrived, LeavesToTheWorkerWhatItMustReadOrRefuse) {
  EXPECT_TRUE(request_has_arrived("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"));
  EXPECT_TRUE(request_has_arrived("POST / HTTP/1.1\r\nContent-Length: 9\r\nExpect: 100-continue\r\n\r\n"));
  EXPECT_TRUE(request_has_arrived("POST / HTTP/1.1\r\nContent-Length: " + std::to_string(HttpServer::kParkedBodyMax + 1) +
                                  "\r\n\r\n"));
  EXPECT_FALSE(request_has_arrived("POST / HTTP/1.1\r\nContent-Length: " + std::to_string(HttpServer::kParkedBodyMax) +
                                   "\r\n\r\n"));
  EXPECT_TRUE(request_has_arrived("POST / HTTP/1.1\r\nContent-Length: lots\r\n\r\n"));  // httplib answers 400
  EXPECT_TRUE(request_has_arrived("GET /" + std::string(HttpServer::kParkedHeadMax, 'a')));  // never ends: 414
  // A header whose value merely mentions a name does not count as that header.
  EXPECT_FALSE(request_has_arrived("POST / HTTP/1.1\r\nX-Note: Content-Length: 0\r\nContent-Length: 3\r\n\r\n"));
}
