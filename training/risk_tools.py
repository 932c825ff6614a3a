"""The risk corpus's tool catalogue: tool families, each with reads, reversible writes,
irreversible acts and regulated changes, labelled by the risk classes of docs/DESIGN.md.

Each family lists services (for dotted and MCP-style names) and tools. A tool is one line:
`class | verb object | description; another description | argument keys`, where the class is
r (read_only), w (reversible_write), i (irreversible) or g (regulated). The words are ours; the
generator turns each line into calls with varied names, descriptions and arguments.

The definitions, in short: reading or computing is read_only whatever the subject (who may read a
record is a permission matter); a change another call can undo is reversible_write; send,
delete, publish, execute, unlock and the like are irreversible; moving money or changing
payments, bookings, accounts, contracts, or health, financial or personal records is regulated.
"""

# One tool a line reads better than wrapped lines, and the lines are data, not code.
# ruff: noqa: E501

CLASSES = {
    "r": "read_only",
    "w": "reversible_write",
    "i": "irreversible",
    "g": "regulated",
}

FAMILIES: dict[str, dict[str, object]] = {
    "email": {
        "services": ["gmail", "mail", "outlook", "mailbox", "smtp"],
        "tools": """
r | list messages | List messages in the inbox; Returns the newest messages of a mailbox, with sender, subject and date. | folder max_results page_token
r | get message | Fetch one e-mail by id, headers and body.; Read a message | message_id format
r | search mail | Search mail with a query such as from:, subject: or has:attachment. | query limit
r | get thread | Returns every message of a conversation thread. | thread_id
r | list labels | The labels defined in the mailbox. | user_id
r | get attachment | Download an attachment of a message as base64. | message_id attachment_id
w | create draft | Save a draft e-mail without sending it.; Create a new draft in the drafts folder | to subject body cc
w | update draft | Replace the content of an existing draft. | draft_id subject body
w | add label | Apply a label to a message.; Tag a conversation with a label | message_id label_id
w | mark read | Mark messages as read or unread. | message_ids read
w | archive message | Move a message out of the inbox into the archive; it can be moved back. | message_id
w | move message | Move a message to another folder. | message_id folder
i | send email | Send an e-mail to one or more recipients.; Sends the message immediately | to subject body cc bcc attachments
i | send draft | Send an existing draft. | draft_id
i | reply message | Reply to a message in its thread. | message_id body reply_all
i | forward message | Forward a message to other recipients. | message_id to note
i | delete message | Permanently delete a message, skipping the trash. | message_id
i | empty trash | Remove every message in the trash folder. | folder
g | update forwarding address | Change the address the account auto-forwards all mail to. | account_id forward_to
g | change account recovery email | Set the recovery e-mail of the mail account. | account_id recovery_email
""",
    },
    "messaging": {
        "services": ["slack", "teams", "chat", "discord", "matrix", "whatsapp"],
        "tools": """
r | list channels | List the channels of the workspace with pagination. | limit cursor
r | get channel history | Recent messages of a channel. | channel_id limit oldest
r | get thread replies | All replies in a message thread. | channel_id thread_ts
r | list members | Members of a channel, with display names. | channel_id
r | get user profile | Detailed profile information for one user, including e-mail and phone. | user_id
r | search messages | Find messages matching a text query. | query count
w | add reaction | Add an emoji reaction to a message. | channel_id timestamp emoji
w | remove reaction | Remove an emoji reaction you added. | channel_id timestamp emoji
w | pin message | Pin a message to the channel. | channel_id message_ts
w | set channel topic | Change a channel's topic line. | channel_id topic
w | create channel | Create a new channel; it can be archived later. | name is_private
w | set status | Set your own status text and emoji. | text emoji expiration
i | post message | Post a new message to a channel.; Send a chat message | channel_id text
i | reply to thread | Reply in a message thread. | channel_id thread_ts text
i | send direct message | Send a private message to a user. | user_id text
i | broadcast announcement | Send an announcement to every member of the workspace. | text audience
i | delete message | Delete a message from a channel. | channel_id message_ts
i | upload file to channel | Upload a file and share it in a channel. | channel_id file
i | kick member | Remove a user from a channel and notify them. | channel_id user_id
g | deactivate user account | Deactivate a member's workspace account. | user_id
g | change user role | Make a member an admin or owner of the workspace. | user_id role
""",
    },
    "files": {
        "services": ["drive", "dropbox", "fs", "storage", "s3", "box"],
        "tools": """
r | read file | Read the contents of a file as text. | path encoding
r | list directory | List the files and folders at a path, with sizes. | path recursive
r | get file metadata | Size, owner, created and modified time of a file. | path
r | search files | Find files whose names match a glob pattern. | root pattern exclude
r | download file | Download a file's bytes. | file_id
r | open file | Open a file and return its text. | path
r | directory tree | A recursive tree view of a folder as JSON. | path depth
w | create folder | Create a directory, with parents if needed. | path parents
w | rename file | Rename a file or folder. | path new_name
w | move file | Move a file to another folder. | source destination
w | copy file | Copy a file to a new path. | source destination
w | edit file | Apply line edits to a text file and return the diff. | path edits dry_run
w | upload file | Upload a new file into a private folder. | path content mime_type
w | trash file | Move a file to the trash, from which it can be restored. | file_id
w | add tag | Add a tag to a file. | file_id tag
i | delete file | Delete a file. | path
i | overwrite file | Write content to a path, replacing whatever the file held. | path content
i | share publicly | Create a public link anyone can open. | file_id
i | email file link | E-mail a link to a file to someone. | file_id to
i | purge folder | Remove a folder and everything under it. | path
i | empty trash | Permanently remove everything in the trash. | drive_id
i | share with external | Give an outside organisation access to a folder. | folder_id email role
g | upgrade storage plan | Buy more storage on the paid plan. | plan_id seats
""",
    },
    "code_exec": {
        "services": ["shell", "ci", "sandbox", "jupyter", "runner", "github_actions"],
        "tools": """
r | get build log | Fetch the log of a CI build. | build_id
r | list workflow runs | List recent runs of a workflow and their status. | workflow status branch
r | get job status | Status of a running job. | job_id
r | lint code | Report lint problems for a file without changing it. | path rules
r | list artifacts | Artifacts produced by a pipeline. | pipeline_id
r | explain command | Describe what a shell command would do, without running it. | command
w | set env variable | Set an environment variable of a pipeline; the old value is kept in history. | name value scope
w | create branch | Create a branch from a commit. | name from_ref
w | add label to pull request | Label a pull request. | pr_number label
w | disable workflow | Disable a workflow; enable it again later. | workflow_id
w | cancel job | Cancel a queued job; it can be re-queued. | job_id
i | run shell command | Run a command in a shell.; Executes the given command and returns stdout and stderr | command cwd timeout
i | execute python | Execute Python code in the sandbox. | code
i | trigger deployment | Start a deployment pipeline to production. | environment ref
i | merge pull request | Merge a pull request into its base branch. | pr_number merge_method
i | force push | Force-push a branch, replacing its remote history. | branch ref
i | delete branch | Delete a remote branch. | branch
i | evaluate script | Run JavaScript in the page and return the result. | script
i | publish package | Publish a package version to the registry. | version tag
g | buy build minutes | Buy extra CI minutes with the card on file. | minutes payment_method
""",
    },
    "databases": {
        "services": ["postgres", "mysql", "db", "sqlite", "mongo", "bigquery"],
        "tools": """
r | query | Run a read-only SQL query.; Run a SELECT and return rows | sql params
r | list tables | List the tables of a schema. | schema
r | describe table | Columns, types and indexes of a table. | table
r | explain query | Show the query plan for a statement without running it. | sql
r | count rows | Count the rows matching a filter. | table filter
r | find documents | Find documents in a collection. | collection filter limit
w | insert row | Insert a row into a table. | table values
w | update row | Update the fields of one row by primary key. | table id values
w | create index | Create an index on a column. | table column
w | create view | Create a view over a query. | name sql
w | set key | Set a key to a value with an optional expiry. | key value ttl
i | drop table | Drop a table and its data. | table cascade
i | truncate table | Remove every row of a table. | table
i | execute sql | Execute an arbitrary SQL statement. | sql
i | delete rows | Delete the rows matching a filter. | table filter
i | delete key | Delete one or more keys. | keys
i | run migration | Apply a schema migration to the live database. | migration
g | update customer balance | Set the stored balance of a customer account. | customer_id balance
g | erase personal data | Erase a person's data for a data-protection request. | subject_id
""",
    },
    "payments": {
        "services": ["stripe", "bank", "paypal", "payments", "ledger", "adyen"],
        "tools": """
r | get balance | The current balance of the account.; Retrieve the available and pending balance | account_id currency
r | list transactions | Transactions of an account between two dates. | account_id from to
r | get payment | Details of one payment. | payment_id
r | list invoices | Invoices of a customer. | customer limit
r | list disputes | Open disputes and their status. | charge limit
r | get exchange rate | The rate between two currencies. | base quote
r | calculate fee | Compute the processing fee for an amount, without charging. | amount currency method
r | list customers | Customers matching an e-mail. | email limit
g | transfer funds | Move money between accounts.; Transfer an amount to another account | from_account to_account amount currency
g | create refund | Refund a payment, in full or in part. | payment_intent amount reason
g | charge card | Charge a stored card. | customer_id amount currency
g | send payment | Pay a payee by bank transfer. | payee_iban amount reference
g | create payout | Pay out the balance to the bank account. | amount destination
g | sign direct debit mandate | Sign a direct-debit mandate for a supplier. | supplier_id iban
g | create payment link | Create a link customers can pay through. | price quantity
g | create invoice | Issue an invoice to a customer. | customer days_until_due
g | cancel subscription | Cancel a customer's subscription. | subscription_id
g | update payment method | Replace the card or bank account on file. | customer_id payment_method
g | create customer | Create a customer account for billing. | name email
w | add note to payment | Attach an internal note to a payment; notes can be edited. | payment_id note
w | create draft invoice | Prepare a draft invoice; nothing is billed until it is issued. | customer items
""",
    },
    "travel": {
        "services": ["booking", "flights", "hotels", "travel", "amadeus", "trips"],
        "tools": """
r | search flights | Search flights between two airports on a date. | origin destination date passengers
r | search hotels | Find hotels in a city with availability. | city check_in check_out guests
r | get booking | Details of a booking by reference. | booking_ref
r | list reservations | Reservations of a traveller. | traveller_id
r | get fare rules | Change and refund rules of a fare. | fare_id
r | check seat map | Seats available on a flight. | flight_id
w | add to trip | Save an option to a trip plan; nothing is booked. | trip_id option_id
w | create itinerary draft | Draft an itinerary for review. | travellers legs
w | hold seat | Hold a seat for 15 minutes; the hold lapses on its own. | flight_id seat
w | save traveller preference | Remember a seat or meal preference. | traveller_id preference
g | book flight | Book and pay for a flight.; Create a flight booking | offer_id passengers payment
g | cancel booking | Cancel a booking. | booking_ref
g | change reservation | Move a reservation to other dates. | booking_ref new_dates
g | sign rental agreement | Sign the car rental agreement for the traveller. | rental_id traveller_id
i | unlock rental car | Unlock the rental car remotely. | rental_id
g | book hotel | Reserve a hotel room with the card on file. | hotel_id room check_in check_out
g | update passenger details | Change the passport details on a booking. | booking_ref passenger passport
g | request refund | Ask the airline for a refund of a ticket. | ticket_number reason
i | send itinerary | E-mail the itinerary to the travellers. | trip_id recipients
i | delete trip | Delete a trip plan and its notes. | trip_id
""",
    },
    "calendar": {
        "services": ["gcal", "calendar", "outlook_calendar", "cal", "scheduler"],
        "tools": """
r | list events | Events between two dates. | calendar_id time_min time_max
r | get event | One event by id. | event_id
r | free busy | Free and busy times of attendees. | attendees time_min time_max
r | find meeting time | Suggest slots when everyone is free. | attendees duration
r | list calendars | Calendars the user can see. | user
w | create hold | Put a tentative hold on the calendar. | start end title
w | create event | Add an event to your own calendar. | title start end location
w | update event | Change an event's time or title. | event_id start end title
w | set reminder | Add a reminder before an event. | event_id minutes
w | decline event | Decline an invitation; you can accept again later. | event_id
w | move event | Move an event to another calendar. | event_id calendar_id
i | send invitation | Send meeting invitations to attendees. | event_id attendees message
i | delete event | Delete an event. | event_id
i | cancel meeting | Cancel a meeting and notify every attendee. | event_id note
i | email agenda | E-mail the agenda of a meeting to its attendees. | event_id
i | clear calendar | Delete every event of a calendar. | calendar_id
g | book appointment | Book a paid appointment with a clinic. | provider_id slot patient_id
i | share calendar externally | Give an outside address full access to a calendar. | calendar_id email
g | reserve paid room | Reserve a meeting room that is billed by the hour. | room_id start end
""",
    },
    "crm": {
        "services": ["salesforce", "hubspot", "crm", "zendesk_sell", "pipedrive"],
        "tools": """
r | get contact | A contact's record, with e-mail, phone and address. | contact_id
r | search contacts | Search contacts by name or company. | query limit
r | list deals | Deals in a pipeline stage. | stage owner
r | get account | An account's details and open opportunities. | account_id
r | list activities | Calls, meetings and notes on a record. | record_id
w | create lead | Add a new lead. | name company email
w | update deal stage | Move a deal to another stage. | deal_id stage
w | add note | Add a note to a contact. | contact_id note
w | assign owner | Assign a record to a sales rep. | record_id owner_id
w | add tag | Tag a contact. | contact_id tag
w | create task | Create a follow-up task. | contact_id due title
i | send campaign | Send an e-mail campaign to a list. | campaign_id list_id
i | email contact | E-mail a contact from the sales rep's address. | contact_id subject body
i | delete contact | Delete a contact and its history. | contact_id
i | merge contacts | Merge two duplicate contacts into one. | primary_id duplicate_id
i | bulk delete records | Delete the records matching a filter. | object filter
g | update billing address | Change the billing address of an account. | account_id address
g | close account | Close a customer account. | account_id reason
g | change account owner | Transfer ownership of a customer account. | account_id new_owner
g | update contact personal data | Change a contact's date of birth and national id. | contact_id date_of_birth national_id
""",
    },
    "hr": {
        "services": ["workday", "bamboohr", "hr", "payroll", "personio", "gusto"],
        "tools": """
r | get employee | An employee's record: role, manager, salary band. | employee_id
r | list employees | Employees of a department. | department
r | get payslip | One payslip of an employee. | employee_id period
r | get time off balance | Remaining leave days. | employee_id
r | list open positions | Open job requisitions. | department
r | get org chart | Reporting lines of a team. | manager_id
w | create job posting draft | Draft a job posting for review. | title description
w | add candidate note | Add an interview note to a candidate. | candidate_id note
w | schedule interview | Put an interview on the panel's calendars. | candidate_id slot
w | update job title draft | Change a draft posting's title. | posting_id title
i | send offer letter | Send an offer letter to a candidate. | candidate_id template
i | publish job posting | Publish a job posting on the careers site. | posting_id
i | reject candidate | Reject a candidate and notify them. | candidate_id reason
g | run payroll | Run payroll for a period and pay salaries. | period company_id
g | update salary | Change an employee's salary. | employee_id amount effective_date
g | terminate employee | End an employee's contract. | employee_id last_day reason
g | approve time off | Approve a leave request. | request_id
g | update bank details | Change the account an employee is paid into. | employee_id iban
g | approve expense claim | Approve an expense claim for reimbursement. | claim_id
g | sign employment contract | Sign an employee's contract on behalf of the company. | employee_id contract_id
i | email payslip | E-mail a payslip to the employee. | employee_id period
i | grant office door access | Give a badge access to the office doors. | badge_id doors
g | file tax return | Submit the payroll tax return to the tax office. | period
g | update tax withholding | Change an employee's tax withholding. | employee_id allowances
""",
    },
    "health": {
        "services": ["ehr", "fhir", "clinic", "epic", "health", "pharmacy"],
        "tools": """
r | get patient record | Read a patient's medical record.; Returns the chart of a patient | patient_id
r | list lab results | Lab results of a patient. | patient_id since
r | get medication list | Current medications of a patient. | patient_id
r | search patients | Find patients by name and date of birth. | name date_of_birth
r | get allergies | Recorded allergies of a patient. | patient_id
r | check drug interaction | Check two drugs for interactions; nothing is recorded. | drug_a drug_b
r | get appointment slots | Free appointment slots of a clinician. | clinician_id date
w | save visit note draft | Save a draft visit note; it is not signed. | patient_id text
w | add reminder | Remind the care team about a follow-up. | patient_id text due
w | flag chart for review | Flag a chart for a colleague's review. | patient_id reason
g | update diagnosis | Add or change a diagnosis in the record. | patient_id code
g | prescribe medication | Write a prescription. | patient_id drug dose
g | update patient address | Change a patient's address. | patient_id address
g | sign visit note | Sign a visit note into the record. | note_id
g | order lab test | Order a lab test for a patient. | patient_id test_code
g | book patient appointment | Book an appointment for a patient. | patient_id slot_id
g | record vaccination | Record a vaccination. | patient_id vaccine lot
i | send results to patient | Send lab results to the patient's portal and e-mail. | patient_id result_id
i | delete draft note | Delete a draft note. | note_id
""",
    },
    "legal": {
        "services": ["docusign", "contracts", "legal", "clm", "ironclad"],
        "tools": """
r | get contract | Read a contract and its clauses. | contract_id
r | list contracts | Contracts of a counterparty. | counterparty status
r | search clauses | Find clauses matching a phrase. | query
r | get signature status | Who has signed an envelope. | envelope_id
r | open contract | Open a contract for reading. | contract_id
r | compare versions | Show the differences between two versions of a contract. | contract_id from_version to_version
w | create contract draft | Draft a contract from a template. | template_id counterparty
w | add comment to draft | Comment on a clause in a draft. | draft_id clause comment
w | update draft clause | Edit a clause of a draft. | draft_id clause text
w | assign reviewer | Assign a lawyer to review a draft. | draft_id reviewer
g | sign contract | Sign a contract on behalf of the company. | contract_id signer
g | send for signature | Send a contract to the counterparty for signature. | contract_id recipients
g | terminate contract | Give notice to end a contract. | contract_id effective_date
g | amend contract | Apply an amendment to a signed contract. | contract_id amendment
g | renew contract | Renew a contract for another term. | contract_id term
i | void envelope | Void an envelope in flight. | envelope_id reason
i | delete contract draft | Delete a draft. | draft_id
i | file court document | File a document with the court. | case_id document_id
""",
    },
    "social": {
        "services": ["twitter", "x", "linkedin", "mastodon", "wordpress", "medium", "youtube"],
        "tools": """
r | get timeline | Recent posts of an account. | account_id count
r | search posts | Search public posts. | query since
r | get post analytics | Views and likes of a post. | post_id
r | list comments | Comments on a post. | post_id
r | get followers | Followers of an account. | account_id
w | create draft post | Save a post as a draft. | text media
w | schedule post draft | Queue a draft for later; it can be edited or unscheduled. | draft_id time
w | update draft | Edit a draft. | draft_id text
w | like post | Like a post. | post_id
w | bookmark post | Bookmark a post. | post_id
i | publish post | Publish a post.; Post a status update | text media visibility
i | publish article | Publish an article to the blog. | article_id
i | reply to comment | Reply publicly to a comment. | comment_id text
i | delete post | Delete a post. | post_id
i | send direct message | Send a private message to an account. | account_id text
i | upload video | Upload and publish a video. | file title privacy
g | change account email | Change the e-mail of the account. | account_id email
g | boost post | Pay to promote a post. | post_id budget currency
""",
    },
    "smart_home": {
        "services": ["homeassistant", "hue", "nest", "smartthings", "iot", "august"],
        "tools": """
r | get device state | Current state of a device. | device_id
r | list devices | Devices in a home. | home_id
r | get temperature | Temperature of a room sensor. | sensor_id
r | get camera snapshot | A still image from a camera. | camera_id
r | get energy usage | Energy used today. | meter_id
w | set thermostat | Set the target temperature. | device_id temperature
w | turn on light | Switch a light on. | light_id brightness
w | turn off light | Switch a light off. | light_id
w | set scene | Activate a scene. | scene_id
w | lock door | Lock a door. | lock_id
w | create automation draft | Save an automation, disabled. | trigger action
i | unlock door | Unlock a door.; Unlocks the front door lock | lock_id
i | disarm alarm | Disarm the security alarm. | system_id code
i | open garage | Open the garage door. | door_id
i | factory reset device | Reset a device to factory settings. | device_id
i | grant guest access code | Create an access code that opens the door. | lock_id code valid_until
g | pay energy bill | Pay the energy bill with the card on file. | account_id amount
g | change subscription plan | Change the paid monitoring plan. | account_id plan
""",
    },
    "cloud": {
        "services": ["aws", "gcp", "azure", "k8s", "terraform", "cloudflare"],
        "tools": """
r | list instances | Virtual machines of a project. | project region
r | describe instance | Details of an instance. | instance_id
r | get logs | Logs of a service. | service since filter
r | list buckets | Storage buckets. | project
r | get metrics | CPU and memory metrics. | resource period
r | get cost report | Spend of the month per service. | month
r | plan changes | Show the changes an apply would make, without applying. | workspace
w | scale deployment | Set the number of replicas. | deployment replicas
w | stop instance | Stop an instance; it can be started again. | instance_id
w | start instance | Start a stopped instance. | instance_id
w | add tag | Tag a resource. | resource_id key value
w | create snapshot | Snapshot a disk. | disk_id name
w | update dns record | Change a DNS record's target. | zone record value
i | terminate instance | Terminate an instance and its local disk. | instance_id
i | delete bucket | Delete a bucket and its objects. | bucket
i | apply changes | Apply the infrastructure plan. | workspace
i | rotate secret | Rotate a secret; the old value stops working. | secret_id
i | make bucket public | Open a bucket to the internet. | bucket
g | change billing account | Move the project to another billing account. | project billing_account
g | purchase reserved capacity | Buy reserved instances for a year. | instance_type count term
g | grant admin role | Give a user the owner role on the organisation account. | member role
""",
    },
    "search": {
        "services": ["brave", "web", "wiki", "kb", "confluence", "notion", "docs"],
        "tools": """
r | web search | Search the web.; Performs a web search and returns titles, links and snippets | query count offset
r | local search | Find businesses near a place. | query location
r | search knowledge base | Search the help center articles. | query
r | get page | Fetch a page by id. | page_id
r | open page | Open a page and return its content. | page_id
r | fetch url | Fetch a URL and return its text. | url
r | summarize document | Summarize a document. | document_id length
r | translate text | Translate a text. | text target_language
r | geocode address | Convert an address into coordinates. | address
r | get directions | Directions between two points. | origin destination mode
w | create page | Create a page in a workspace. | parent title content
w | update page | Update a page's content. | page_id content
w | append block | Append blocks to a page. | page_id children
w | move page | Move a page under another parent. | page_id parent_id
w | add comment | Comment on a page. | page_id text
i | delete page | Delete a page. | page_id
i | publish page to web | Make a page public on the web. | page_id
i | delete space | Delete a space and its pages. | space_key
g | change workspace plan | Upgrade the paid workspace plan. | workspace_id plan seats
""",
    },
    "analytics": {
        "services": ["ga", "mixpanel", "amplitude", "analytics", "looker", "metabase"],
        "tools": """
r | run report | Run a report over a date range. | property_id metrics dimensions start end
r | get funnel | Conversion of a funnel. | funnel_id range
r | list dashboards | Dashboards of a workspace. | workspace
r | get dashboard | A dashboard and its charts. | dashboard_id
r | compute retention | Compute retention cohorts. | event period
r | export report csv | Export a report as CSV text. | report_id
r | forecast metric | Forecast a metric from its history. | metric horizon
w | create dashboard | Create a dashboard. | name charts
w | add chart | Add a chart to a dashboard. | dashboard_id query
w | create segment | Define a user segment. | name filter
w | rename report | Rename a report. | report_id name
i | delete dashboard | Delete a dashboard. | dashboard_id
g | delete user data | Delete a user's events and profile for a privacy request. | user_id
i | email report | Send a report to a distribution list. | report_id recipients
i | share dashboard publicly | Publish a dashboard at a public link. | dashboard_id
g | change data retention | Change how long personal data is kept for the account. | property_id months
g | update billing plan | Change the paid plan. | plan
""",
    },
    "ecommerce": {
        "services": ["shopify", "store", "shop", "woocommerce", "cart", "amazon"],
        "tools": """
r | search products | Search the catalogue. | query limit
r | get order | An order by id. | order_id
r | list orders | Orders of a customer. | customer_id status
r | get shipping estimate | Shipping cost and date for a cart. | cart_id address
r | check inventory | Stock of a SKU. | sku warehouse
r | get product reviews | Reviews of a product. | product_id
w | add to cart | Add an item to the cart. | cart_id sku quantity
w | remove from cart | Remove an item from the cart. | cart_id sku
w | update cart quantity | Change a cart line's quantity. | cart_id line_id quantity
w | apply coupon | Apply a coupon code to the cart. | cart_id code
w | add to wishlist | Save a product for later. | product_id
w | update product description | Edit a product's description. | product_id description
g | place order | Check out the cart and pay.; Submit the order | cart_id payment_method address
g | cancel order | Cancel an order. | order_id reason
g | issue refund | Refund an order. | order_id amount
g | change shipping address | Change the delivery address of a paid order. | order_id address
i | send order confirmation | E-mail the confirmation to the customer. | order_id
i | open parcel locker | Open the parcel locker so the courier can take the return. | locker_id
i | delete product | Delete a product from the store. | product_id
i | publish product | Make a product live on the storefront. | product_id
""",
    },
    "ticketing": {
        "services": ["jira", "zendesk", "linear", "servicenow", "github", "gitlab"],
        "tools": """
r | get issue | Details of an issue. | issue_id
r | list issues | Issues with filters. | project status assignee
r | search issues | Search issues and pull requests. | q sort
r | get ticket comments | Comments on a ticket. | ticket_id
r | list sprints | Sprints of a board. | board_id
w | create issue | Create an issue. | project title body labels
w | update issue | Update an issue's fields. | issue_id title status labels
w | assign issue | Assign an issue to someone. | issue_id assignee
w | add label | Label a ticket. | ticket_id label
w | change priority | Change a ticket's priority. | ticket_id priority
w | create branch | Create a branch for an issue. | issue_id base
w | link issues | Link two issues. | from_id to_id type
i | reply to customer | Send a public reply to the requester. | ticket_id body
i | upload attachment to public reply | Upload a file and attach it to a reply the customer sees. | ticket_id file
i | delete issue | Delete an issue. | issue_id
i | add public comment | Post a comment visible to the customer. | ticket_id body
i | close and notify | Close the ticket and e-mail the requester. | ticket_id message
g | issue account credit | Credit the customer's account. | ticket_id amount
g | approve refund request | Approve a customer's refund request. | ticket_id amount
g | change customer plan | Change the customer's paid plan. | customer_id plan
""",
    },
}
