"""The keys each Responses API object may carry, from OpenAI's schema (generated).

Written by tests/normalize/responses_shapes.py from tests/spec/openai-schemas.json; edit that,
not this. Each line of ``TABLE`` is a shape: ``Name: key key=Spec ...`` for an object (``*`` for
the keys its additionalProperties allows), ``Name | value=Shape ...`` for a union told apart by
its ``type`` (``-`` for a member without one). A ``Spec`` names the shape of an object value
and, after ``[``, that of an array's items; a key without one is not checked further.
"""

from __future__ import annotations

from typing import Final

# The Response's properties that may not be null (OpenAI sends ``usage: null`` and
# ``user: null`` in Responses still in progress): a null one is left out.
NOT_NULL: Final = frozenset(
    {
        "created_at",
        "id",
        "model",
        "object",
        "output",
        "parallel_tool_calls",
        "prompt_cache_options",
        "status",
        "text",
        "tool_choice",
        "tools",
        "usage",
        "user",
    }
)

TABLE: Final = """
AdditionalTools: type id role tools=[Tool
AdditionalToolsItemParam: id type role tools=[Tool
Annotation | container_file_citation=ContainerFileCitationBody file_citation=FileCitationBody
    file_path=FilePath url_citation=UrlCitationBody
ApplyPatchCreateFileOperation: type path diff
ApplyPatchCreateFileOperationParam: type path diff
ApplyPatchCreateFileOperation|ApplyPatchDeleteFileOperation|ApplyPatchUpdateFileOperation |
    create_file=ApplyPatchCreateFileOperation delete_file=ApplyPatchDeleteFileOperation
    update_file=ApplyPatchUpdateFileOperation
ApplyPatchDeleteFileOperation: type path
ApplyPatchDeleteFileOperationParam: type path
ApplyPatchOperationParam | create_file=ApplyPatchCreateFileOperationParam
    delete_file=ApplyPatchDeleteFileOperationParam
    update_file=ApplyPatchUpdateFileOperationParam
ApplyPatchToolCall: type id call_id caller=ToolCallCaller status
    operation=ApplyPatchCreateFileOperation|ApplyPatchDeleteFileOperation|ApplyPatchUpdateFileOperation
    created_by
ApplyPatchToolCallItemParam: type id call_id caller=ToolCallCallerParam status
    operation=ApplyPatchOperationParam
ApplyPatchToolCallOutput: type id call_id caller=ToolCallCaller status output created_by
ApplyPatchToolCallOutputItemParam: type id call_id caller=ToolCallCallerParam status output
ApplyPatchToolParam: type allowed_callers
ApplyPatchUpdateFileOperation: type path diff
ApplyPatchUpdateFileOperationParam: type path diff
ApproximateLocation: type country region city timezone
AutoCodeInterpreterToolParam: type file_ids memory_limit
    network_policy=ContainerNetworkPolicyDisabledParam|ContainerNetworkPolicyAllowlistParam
ClickParam: type button x y keys
CodeInterpreterOutputImage: type url
CodeInterpreterOutputLogs: type logs
CodeInterpreterOutputLogs|CodeInterpreterOutputImage | image=CodeInterpreterOutputImage
    logs=CodeInterpreterOutputLogs
CodeInterpreterTool: type container=AutoCodeInterpreterToolParam allowed_callers
CodeInterpreterToolCall: type id status container_id code
    outputs=[CodeInterpreterOutputLogs|CodeInterpreterOutputImage
CompactionBody: type id encrypted_content created_by
CompactionSummaryItemParam: id type encrypted_content
CompactionTriggerItemParam: type
ComparisonFilter: type key value
CompoundFilter: type filters=[ComparisonFilter
ComputerAction | click=ClickParam double_click=DoubleClickAction drag=DragParam
    keypress=KeyPressAction move=MoveParam screenshot=ScreenshotParam scroll=ScrollParam
    type=TypeParam wait=WaitParam
ComputerCallOutputItemParam: id call_id type output=ComputerScreenshotImage
    acknowledged_safety_checks=[ComputerCallSafetyCheckParam status
ComputerCallSafetyCheckParam: id code message
ComputerScreenshotImage: type image_url file_id
ComputerTool: type
ComputerToolCall: type id call_id action=ComputerAction actions=[ComputerAction
    pending_safety_checks=[ComputerCallSafetyCheckParam status
ComputerToolCallOutputResource: type id call_id
    acknowledged_safety_checks=[ComputerCallSafetyCheckParam output=ComputerScreenshotImage
    status created_by
ComputerUsePreviewTool: type environment display_width display_height
ContainerAutoParam: type file_ids memory_limit
    network_policy=ContainerNetworkPolicyDisabledParam|ContainerNetworkPolicyAllowlistParam
    skills=[SkillReferenceParam|InlineSkillParam
ContainerAutoParam|LocalEnvironmentParam|ContainerReferenceParam |
    container_auto=ContainerAutoParam container_reference=ContainerReferenceParam
    local=LocalEnvironmentParam
ContainerFileCitationBody: type container_id file_id start_index end_index filename
ContainerNetworkPolicyAllowlistParam: type allowed_domains
    domain_secrets=[ContainerNetworkPolicyDomainSecretParam
ContainerNetworkPolicyDisabledParam: type
ContainerNetworkPolicyDisabledParam|ContainerNetworkPolicyAllowlistParam |
    allowlist=ContainerNetworkPolicyAllowlistParam disabled=ContainerNetworkPolicyDisabledParam
ContainerNetworkPolicyDomainSecretParam: domain name value
ContainerReferenceParam: type container_id
ContainerReferenceResource: type container_id
CoordParam: x y
CustomGrammarFormatParam: type syntax definition
CustomTextFormatParam: type
CustomTextFormatParam|CustomGrammarFormatParam | grammar=CustomGrammarFormatParam
    text=CustomTextFormatParam
CustomToolCall: type id call_id caller=ToolCallCaller namespace name input
CustomToolCallOutput: type id call_id caller=ToolCallCallerParam
    output=[FunctionAndCustomToolCallOutput
CustomToolCallOutputResource: type id call_id caller=ToolCallCallerParam
    output=[FunctionAndCustomToolCallOutput status created_by
CustomToolParam: type name description format=CustomTextFormatParam|CustomGrammarFormatParam
    defer_loading allowed_callers
DirectToolCallCaller: type
DirectToolCallCallerParam: type
DoubleClickAction: type x y keys
DragParam: type path=[CoordParam keys
EasyInputMessage+InputMessage+ItemReferenceParam: role content=[InputContent phase type status
    id
EasyInputMessage+InputMessage+OutputMessage: role
    content=[InputContent|InputContent|OutputMessageContent phase type status id
EmptyModelParam:
FileCitationBody: type file_id index filename
FilePath: type file_id index
FileSearchTool: type vector_store_ids max_num_results ranking_options=RankingOptions
    filters=Filters
FileSearchToolCall: id type status queries results=[FileSearchToolCall.results.0.item
FileSearchToolCall.results.0.item: file_id text filename attributes score
Filters | and=CompoundFilter eq=ComparisonFilter gt=ComparisonFilter gte=ComparisonFilter
    in=ComparisonFilter lt=ComparisonFilter lte=ComparisonFilter ne=ComparisonFilter
    nin=ComparisonFilter or=CompoundFilter
FunctionAndCustomToolCallOutput | input_file=InputFileContent input_image=InputImageContent
    input_text=InputTextContent
FunctionCallOutputItemParam: id call_id type
    output=[InputTextContentParam|InputImageContentParamAutoParam|InputFileContentParam name
    namespace caller=ToolCallCallerParam status
FunctionShellAction: commands timeout_ms max_output_length
FunctionShellActionParam: commands timeout_ms max_output_length
FunctionShellCall: type id call_id caller=ToolCallCaller action=FunctionShellAction status
    environment=LocalEnvironmentResource|ContainerReferenceResource created_by
FunctionShellCallItemParam: id call_id caller=ToolCallCallerParam type
    action=FunctionShellActionParam status
    environment=LocalEnvironmentParam|ContainerReferenceParam
FunctionShellCallOutput: type id call_id caller=ToolCallCaller status
    output=[FunctionShellCallOutputContent max_output_length created_by
FunctionShellCallOutputContent: stdout stderr
    outcome=FunctionShellCallOutputTimeoutOutcome|FunctionShellCallOutputExitOutcome created_by
FunctionShellCallOutputContentParam: stdout stderr outcome=FunctionShellCallOutputOutcomeParam
FunctionShellCallOutputExitOutcome: type exit_code
FunctionShellCallOutputExitOutcomeParam: type exit_code
FunctionShellCallOutputItemParam: id call_id caller=ToolCallCallerParam type
    output=[FunctionShellCallOutputContentParam status max_output_length
FunctionShellCallOutputOutcomeParam | exit=FunctionShellCallOutputExitOutcomeParam
    timeout=FunctionShellCallOutputTimeoutOutcomeParam
FunctionShellCallOutputTimeoutOutcome: type
FunctionShellCallOutputTimeoutOutcomeParam: type
FunctionShellCallOutputTimeoutOutcome|FunctionShellCallOutputExitOutcome |
    exit=FunctionShellCallOutputExitOutcome timeout=FunctionShellCallOutputTimeoutOutcome
FunctionShellToolParam: type
    environment=ContainerAutoParam|LocalEnvironmentParam|ContainerReferenceParam allowed_callers
FunctionTool: type name description parameters output_schema strict defer_loading
    allowed_callers
FunctionToolCall: id type call_id caller=ToolCallCaller namespace name arguments status
FunctionToolCallOutputResource: id type call_id name namespace caller=ToolCallCallerParam
    output=[FunctionAndCustomToolCallOutput status created_by
FunctionToolParam: name description parameters=EmptyModelParam strict type output_schema
    defer_loading allowed_callers
FunctionToolParam|CustomToolParam | custom=CustomToolParam function=FunctionToolParam
HTTPError: type code message
HybridSearchOptions: embedding_weight text_weight
ImageGenTool: type model quality size output_format output_compression moderation background
    input_fidelity input_image_mask=ImageGenTool.input_image_mask partial_images action
ImageGenTool.input_image_mask: image_url file_id
ImageGenToolCall: type id status result
InlineSkillParam: type name description source=InlineSkillSourceParam
InlineSkillSourceParam: type media_type data
InputContent | input_file=InputFileContent input_image=InputImageContent
    input_text=InputTextContent
InputContent|InputContent|OutputMessageContent | input_file=InputFileContent
    input_image=InputImageContent input_text=InputTextContent output_text=OutputTextContent
    refusal=RefusalContent
InputFileContent: type file_id filename file_data
    prompt_cache_breakpoint=PromptCacheBreakpointConfig file_url detail
InputFileContentParam: type file_id filename file_data file_url detail
    prompt_cache_breakpoint=PromptCacheBreakpointParam
InputImageContent: type image_url file_id detail
    prompt_cache_breakpoint=PromptCacheBreakpointConfig
InputImageContentParamAutoParam: type image_url file_id detail
    prompt_cache_breakpoint=PromptCacheBreakpointParam
InputItem | -=EasyInputMessage+InputMessage+ItemReferenceParam
    additional_tools=AdditionalToolsItemParam apply_patch_call=ApplyPatchToolCallItemParam
    apply_patch_call_output=ApplyPatchToolCallOutputItemParam
    code_interpreter_call=CodeInterpreterToolCall compaction=CompactionSummaryItemParam
    compaction_trigger=CompactionTriggerItemParam computer_call=ComputerToolCall
    computer_call_output=ComputerCallOutputItemParam custom_tool_call=CustomToolCall
    custom_tool_call_output=CustomToolCallOutput file_search_call=FileSearchToolCall
    function_call=FunctionToolCall function_call_output=FunctionCallOutputItemParam
    image_generation_call=ImageGenToolCall item_reference=ItemReferenceParam
    local_shell_call=LocalShellToolCall local_shell_call_output=LocalShellToolCallOutput
    mcp_approval_request=MCPApprovalRequest mcp_approval_response=MCPApprovalResponse
    mcp_call=MCPToolCall mcp_list_tools=MCPListTools
    message=EasyInputMessage+InputMessage+OutputMessage program=ProgramItemParam
    program_output=ProgramOutputItemParam reasoning=ReasoningItem
    shell_call=FunctionShellCallItemParam shell_call_output=FunctionShellCallOutputItemParam
    tool_search_call=ToolSearchCallItemParam tool_search_output=ToolSearchOutputItemParam
    web_search_call=WebSearchToolCall
InputTextContent: type text prompt_cache_breakpoint=PromptCacheBreakpointConfig
InputTextContentParam: type text prompt_cache_breakpoint=PromptCacheBreakpointParam
InputTextContentParam|InputImageContentParamAutoParam|InputFileContentParam |
    input_file=InputFileContentParam input_image=InputImageContentParamAutoParam
    input_text=InputTextContentParam
InputTextContent|InputImageContent|InputFileContent | input_file=InputFileContent
    input_image=InputImageContent input_text=InputTextContent
ItemReferenceParam: type id
KeyPressAction: type keys
LocalEnvironmentParam: type skills=[LocalSkillParam
LocalEnvironmentParam|ContainerReferenceParam | container_reference=ContainerReferenceParam
    local=LocalEnvironmentParam
LocalEnvironmentResource: type
LocalEnvironmentResource|ContainerReferenceResource |
    container_reference=ContainerReferenceResource local=LocalEnvironmentResource
LocalShellExecAction: type command timeout_ms working_directory env user
LocalShellToolCall: type id call_id action=LocalShellExecAction status
LocalShellToolCallOutput: type id output status
LocalShellToolParam: type
LocalSkillParam: name description path
LogProb: token logprob bytes top_logprobs=[TopLogProb
MCPApprovalRequest: type id server_label name arguments
MCPApprovalResponse: type id approval_request_id approve reason
MCPApprovalResponseResource: type id approval_request_id approve reason
MCPListTools: type id server_label tools=[MCPListToolsTool error
MCPListToolsTool: name description input_schema=MCPListToolsTool.input_schema
    annotations=MCPListToolsTool.annotations.0
MCPListToolsTool.annotations.0:
MCPListToolsTool.input_schema:
MCPProtocolError: type code message
MCPTool: type server_label server_url connector_id tunnel_id authorization server_description
    headers allowed_tools=MCPToolFilter allowed_callers
    require_approval=MCPTool.require_approval.0.0 defer_loading
MCPTool.require_approval.0.0: always=MCPToolFilter never=MCPToolFilter
MCPToolCall: type id server_label name arguments output error=MCPToolCallError status
    approval_request_id
MCPToolCallError | http_error=HTTPError mcp_protocol_error=MCPProtocolError
    mcp_tool_execution_error=MCPToolExecutionError
MCPToolExecutionError: type content
MCPToolFilter: tool_names read_only
Moderation: input=ModerationResultBody|ModerationErrorBody
    output=ModerationResultBody|ModerationErrorBody
ModerationErrorBody: type code message
ModerationResultBody: type model flagged categories category_scores category_applied_input_types
ModerationResultBody|ModerationErrorBody | error=ModerationErrorBody
    moderation_result=ModerationResultBody
MoveParam: type x y keys
NamespaceToolParam: type name description tools=[FunctionToolParam|CustomToolParam
OutputContent | output_text=OutputTextContent reasoning_text=ReasoningTextContent
    refusal=RefusalContent
OutputItem | additional_tools=AdditionalTools apply_patch_call=ApplyPatchToolCall
    apply_patch_call_output=ApplyPatchToolCallOutput
    code_interpreter_call=CodeInterpreterToolCall compaction=CompactionBody
    computer_call=ComputerToolCall computer_call_output=ComputerToolCallOutputResource
    custom_tool_call=CustomToolCall custom_tool_call_output=CustomToolCallOutputResource
    file_search_call=FileSearchToolCall function_call=FunctionToolCall
    function_call_output=FunctionToolCallOutputResource image_generation_call=ImageGenToolCall
    local_shell_call=LocalShellToolCall local_shell_call_output=LocalShellToolCallOutput
    mcp_approval_request=MCPApprovalRequest mcp_approval_response=MCPApprovalResponseResource
    mcp_call=MCPToolCall mcp_list_tools=MCPListTools message=OutputMessage program=Program
    program_output=ProgramOutput reasoning=ReasoningItem shell_call=FunctionShellCall
    shell_call_output=FunctionShellCallOutput tool_search_call=ToolSearchCall
    tool_search_output=ToolSearchOutput web_search_call=WebSearchToolCall
OutputMessage: id type role content=[OutputMessageContent phase status
OutputMessageContent | output_text=OutputTextContent refusal=RefusalContent
OutputTextContent: type text annotations=[Annotation logprobs=[LogProb
Program: type id call_id code fingerprint
ProgramItemParam: id type call_id code fingerprint
ProgramOutput: type id call_id result status
ProgramOutputItemParam: id type call_id result status
ProgramToolCallCaller: type caller_id
ProgramToolCallCallerParam: type caller_id
ProgrammaticToolCallingParam: type
Prompt: id version variables=ResponsePromptVariables
PromptCacheBreakpointConfig: mode
PromptCacheBreakpointParam: mode
PromptCacheOptions: ttl mode
RankingOptions: ranker score_threshold hybrid_search=HybridSearchOptions
Reasoning: mode effort summary context generate_summary
ReasoningItem: type id encrypted_content summary=[SummaryTextContent
    content=[ReasoningTextContent status
ReasoningTextContent: type text
RefusalContent: type refusal
Response: metadata top_logprobs temperature top_p user safety_identifier prompt_cache_key
    prompt_cache_retention previous_response_id model background max_tool_calls
    text=ResponseTextParam tools=[Tool tool_choice=ToolChoiceParam prompt=Prompt service_tier
    truncation id object status created_at completed_at error=ResponseError
    incomplete_details=Response.2.incomplete_details.0 output=[OutputItem reasoning=Reasoning
    instructions=[InputItem output_text usage=ResponseUsage
    prompt_cache_options=PromptCacheOptions moderation=Moderation parallel_tool_calls
    conversation=ResponseConversation max_output_tokens
Response.2.incomplete_details.0: reason
ResponseAudioDeltaEvent: type sequence_number delta
ResponseAudioDoneEvent: type sequence_number
ResponseAudioTranscriptDeltaEvent: type delta sequence_number
ResponseAudioTranscriptDoneEvent: type sequence_number
ResponseCodeInterpreterCallCodeDeltaEvent: type output_index item_id delta sequence_number
ResponseCodeInterpreterCallCodeDoneEvent: type output_index item_id code sequence_number
ResponseCodeInterpreterCallCompletedEvent: type output_index item_id sequence_number
ResponseCodeInterpreterCallInProgressEvent: type output_index item_id sequence_number
ResponseCodeInterpreterCallInterpretingEvent: type output_index item_id sequence_number
ResponseCompletedEvent: type response=Response sequence_number
ResponseContentPartAddedEvent: type item_id output_index content_index part=OutputContent
    sequence_number
ResponseContentPartDoneEvent: type item_id output_index content_index sequence_number
    part=OutputContent
ResponseConversation: id
ResponseCreatedEvent: type response=Response sequence_number
ResponseCustomToolCallInputDeltaEvent: type sequence_number output_index item_id delta
ResponseCustomToolCallInputDoneEvent: type sequence_number output_index item_id input
ResponseError: code message
ResponseErrorEvent: type code message param sequence_number
ResponseFailedEvent: type sequence_number response=Response
ResponseFileSearchCallCompletedEvent: type output_index item_id sequence_number
ResponseFileSearchCallInProgressEvent: type output_index item_id sequence_number
ResponseFileSearchCallSearchingEvent: type output_index item_id sequence_number
ResponseFormatJsonObject: type
ResponseFormatText: type
ResponseFunctionCallArgumentsDeltaEvent: type item_id output_index sequence_number delta
ResponseFunctionCallArgumentsDoneEvent: type item_id name output_index sequence_number arguments
ResponseImageGenCallCompletedEvent: type output_index sequence_number item_id
ResponseImageGenCallGeneratingEvent: type output_index item_id sequence_number
ResponseImageGenCallInProgressEvent: type output_index item_id sequence_number
ResponseImageGenCallPartialImageEvent: type output_index item_id sequence_number
    partial_image_index partial_image_b64 size quality background output_format
ResponseInProgressEvent: type response=Response sequence_number
ResponseIncompleteEvent: type response=Response sequence_number
ResponseLogProb: token logprob top_logprobs=[ResponseLogProb.top_logprobs.item
ResponseLogProb.top_logprobs.item: token logprob
ResponseMCPCallArgumentsDeltaEvent: type output_index item_id delta sequence_number
ResponseMCPCallArgumentsDoneEvent: type output_index item_id arguments sequence_number
ResponseMCPCallCompletedEvent: type item_id output_index sequence_number
ResponseMCPCallFailedEvent: type item_id output_index sequence_number
ResponseMCPCallInProgressEvent: type sequence_number output_index item_id
ResponseMCPListToolsCompletedEvent: type item_id output_index sequence_number
ResponseMCPListToolsFailedEvent: type item_id output_index sequence_number
ResponseMCPListToolsInProgressEvent: type item_id output_index sequence_number
ResponseOutputItemAddedEvent: type output_index sequence_number item=OutputItem
ResponseOutputItemDoneEvent: type output_index sequence_number item=OutputItem
ResponseOutputTextAnnotationAddedEvent: type item_id output_index content_index annotation_index
    sequence_number annotation=Annotation
ResponsePromptVariables: *=InputTextContent|InputImageContent|InputFileContent
ResponseQueuedEvent: type response=Response sequence_number
ResponseReasoningSummaryPartAddedEvent: type item_id output_index summary_index sequence_number
    part=ResponseReasoningSummaryPartAddedEvent.part
ResponseReasoningSummaryPartAddedEvent.part: type text
ResponseReasoningSummaryPartDoneEvent: type item_id output_index summary_index status
    sequence_number part=ResponseReasoningSummaryPartDoneEvent.part
ResponseReasoningSummaryPartDoneEvent.part: type text
ResponseReasoningSummaryTextDeltaEvent: type item_id output_index summary_index delta
    sequence_number
ResponseReasoningSummaryTextDoneEvent: type item_id output_index summary_index text
    sequence_number
ResponseReasoningTextDeltaEvent: type item_id output_index content_index delta sequence_number
ResponseReasoningTextDoneEvent: type item_id output_index content_index text sequence_number
ResponseRefusalDeltaEvent: type item_id output_index content_index delta sequence_number
ResponseRefusalDoneEvent: type item_id output_index content_index refusal sequence_number
ResponseShellCallCommandAddedStreamingEvent: type sequence_number output_index command_index
    command
ResponseShellCallCommandDeltaStreamingEvent: type sequence_number output_index command_index
    delta obfuscation
ResponseShellCallCommandDoneStreamingEvent: type sequence_number output_index command_index
    command
ResponseShellCallOutputContentDeltaStreamingEvent: type sequence_number item_id output_index
    command_index delta=ShellCallOutputDelta
ResponseShellCallOutputContentDoneStreamingEvent: type sequence_number item_id output_index
    command_index output=[FunctionShellCallOutputContent
ResponseStreamEvent | error=ResponseErrorEvent response.audio.delta=ResponseAudioDeltaEvent
    response.audio.done=ResponseAudioDoneEvent
    response.audio.transcript.delta=ResponseAudioTranscriptDeltaEvent
    response.audio.transcript.done=ResponseAudioTranscriptDoneEvent
    response.code_interpreter_call.completed=ResponseCodeInterpreterCallCompletedEvent
    response.code_interpreter_call.in_progress=ResponseCodeInterpreterCallInProgressEvent
    response.code_interpreter_call.interpreting=ResponseCodeInterpreterCallInterpretingEvent
    response.code_interpreter_call_code.delta=ResponseCodeInterpreterCallCodeDeltaEvent
    response.code_interpreter_call_code.done=ResponseCodeInterpreterCallCodeDoneEvent
    response.completed=ResponseCompletedEvent
    response.content_part.added=ResponseContentPartAddedEvent
    response.content_part.done=ResponseContentPartDoneEvent
    response.created=ResponseCreatedEvent
    response.custom_tool_call_input.delta=ResponseCustomToolCallInputDeltaEvent
    response.custom_tool_call_input.done=ResponseCustomToolCallInputDoneEvent
    response.failed=ResponseFailedEvent
    response.file_search_call.completed=ResponseFileSearchCallCompletedEvent
    response.file_search_call.in_progress=ResponseFileSearchCallInProgressEvent
    response.file_search_call.searching=ResponseFileSearchCallSearchingEvent
    response.function_call_arguments.delta=ResponseFunctionCallArgumentsDeltaEvent
    response.function_call_arguments.done=ResponseFunctionCallArgumentsDoneEvent
    response.image_generation_call.completed=ResponseImageGenCallCompletedEvent
    response.image_generation_call.generating=ResponseImageGenCallGeneratingEvent
    response.image_generation_call.in_progress=ResponseImageGenCallInProgressEvent
    response.image_generation_call.partial_image=ResponseImageGenCallPartialImageEvent
    response.in_progress=ResponseInProgressEvent response.incomplete=ResponseIncompleteEvent
    response.mcp_call.completed=ResponseMCPCallCompletedEvent
    response.mcp_call.failed=ResponseMCPCallFailedEvent
    response.mcp_call.in_progress=ResponseMCPCallInProgressEvent
    response.mcp_call_arguments.delta=ResponseMCPCallArgumentsDeltaEvent
    response.mcp_call_arguments.done=ResponseMCPCallArgumentsDoneEvent
    response.mcp_list_tools.completed=ResponseMCPListToolsCompletedEvent
    response.mcp_list_tools.failed=ResponseMCPListToolsFailedEvent
    response.mcp_list_tools.in_progress=ResponseMCPListToolsInProgressEvent
    response.output_item.added=ResponseOutputItemAddedEvent
    response.output_item.done=ResponseOutputItemDoneEvent
    response.output_text.annotation.added=ResponseOutputTextAnnotationAddedEvent
    response.output_text.delta=ResponseTextDeltaEvent
    response.output_text.done=ResponseTextDoneEvent response.queued=ResponseQueuedEvent
    response.reasoning_summary_part.added=ResponseReasoningSummaryPartAddedEvent
    response.reasoning_summary_part.done=ResponseReasoningSummaryPartDoneEvent
    response.reasoning_summary_text.delta=ResponseReasoningSummaryTextDeltaEvent
    response.reasoning_summary_text.done=ResponseReasoningSummaryTextDoneEvent
    response.reasoning_text.delta=ResponseReasoningTextDeltaEvent
    response.reasoning_text.done=ResponseReasoningTextDoneEvent
    response.refusal.delta=ResponseRefusalDeltaEvent
    response.refusal.done=ResponseRefusalDoneEvent
    response.shell_call_command.added=ResponseShellCallCommandAddedStreamingEvent
    response.shell_call_command.delta=ResponseShellCallCommandDeltaStreamingEvent
    response.shell_call_command.done=ResponseShellCallCommandDoneStreamingEvent
    response.shell_call_output_content.delta=ResponseShellCallOutputContentDeltaStreamingEvent
    response.shell_call_output_content.done=ResponseShellCallOutputContentDoneStreamingEvent
    response.web_search_call.completed=ResponseWebSearchCallCompletedEvent
    response.web_search_call.in_progress=ResponseWebSearchCallInProgressEvent
    response.web_search_call.searching=ResponseWebSearchCallSearchingEvent
ResponseTextDeltaEvent: type item_id output_index content_index delta sequence_number
    logprobs=[ResponseLogProb
ResponseTextDoneEvent: type item_id output_index content_index text sequence_number
    logprobs=[ResponseLogProb
ResponseTextParam: format=TextResponseFormatConfiguration verbosity
ResponseUsage: input_tokens input_tokens_details=ResponseUsage.input_tokens_details
    output_tokens output_tokens_details=ResponseUsage.output_tokens_details total_tokens
ResponseUsage.input_tokens_details: cached_tokens cache_write_tokens
ResponseUsage.output_tokens_details: reasoning_tokens
ResponseWebSearchCallCompletedEvent: type output_index item_id sequence_number
ResponseWebSearchCallInProgressEvent: type output_index item_id sequence_number
ResponseWebSearchCallSearchingEvent: type output_index item_id sequence_number
ScreenshotParam: type
ScrollParam: type x y scroll_x scroll_y keys
ShellCallOutputDelta: stdout stderr
SkillReferenceParam: type skill_id version
SkillReferenceParam|InlineSkillParam | inline=InlineSkillParam
    skill_reference=SkillReferenceParam
SpecificApplyPatchParam: type
SpecificFunctionShellParam: type
SpecificProgrammaticToolCallingParam: type
SummaryTextContent: type text
TextResponseFormatConfiguration | json_object=ResponseFormatJsonObject
    json_schema=TextResponseFormatJsonSchema text=ResponseFormatText
TextResponseFormatJsonSchema: type description name schema strict
Tool | apply_patch=ApplyPatchToolParam code_interpreter=CodeInterpreterTool
    computer=ComputerTool computer_use_preview=ComputerUsePreviewTool custom=CustomToolParam
    file_search=FileSearchTool function=FunctionTool image_generation=ImageGenTool
    local_shell=LocalShellToolParam mcp=MCPTool namespace=NamespaceToolParam
    programmatic_tool_calling=ProgrammaticToolCallingParam shell=FunctionShellToolParam
    tool_search=ToolSearchToolParam web_search=WebSearchTool web_search_2025_08_26=WebSearchTool
    web_search_preview=WebSearchPreviewTool web_search_preview_2025_03_11=WebSearchPreviewTool
ToolCallCaller | direct=DirectToolCallCaller program=ProgramToolCallCaller
ToolCallCallerParam | direct=DirectToolCallCallerParam program=ProgramToolCallCallerParam
ToolChoiceAllowed: type mode tools
ToolChoiceCustom: type name
ToolChoiceFunction: type name
ToolChoiceMCP: type server_label name
ToolChoiceParam | allowed_tools=ToolChoiceAllowed apply_patch=SpecificApplyPatchParam
    code_interpreter=ToolChoiceTypes computer=ToolChoiceTypes computer_use=ToolChoiceTypes
    computer_use_preview=ToolChoiceTypes custom=ToolChoiceCustom file_search=ToolChoiceTypes
    function=ToolChoiceFunction image_generation=ToolChoiceTypes mcp=ToolChoiceMCP
    programmatic_tool_calling=SpecificProgrammaticToolCallingParam
    shell=SpecificFunctionShellParam web_search_preview=ToolChoiceTypes
    web_search_preview_2025_03_11=ToolChoiceTypes
ToolChoiceTypes: type
ToolSearchCall: type id call_id execution arguments status created_by
ToolSearchCallItemParam: id call_id type execution arguments=EmptyModelParam status
ToolSearchOutput: type id call_id execution tools=[Tool status created_by
ToolSearchOutputItemParam: id call_id type execution tools=[Tool status
ToolSearchToolParam: type execution description parameters=EmptyModelParam
TopLogProb: token logprob bytes
TypeParam: type text
UrlCitationBody: type url start_index end_index title
WaitParam: type
WebSearchActionFind: type url pattern
WebSearchActionOpenPage: type url
WebSearchActionSearch: type query queries sources=[WebSearchActionSearch.sources.item
WebSearchActionSearch.sources.item: type url
WebSearchActionSearch|WebSearchActionOpenPage|WebSearchActionFind |
    find_in_page=WebSearchActionFind open_page=WebSearchActionOpenPage
    search=WebSearchActionSearch
WebSearchApproximateLocation: type country region city timezone
WebSearchPreviewTool: type user_location=ApproximateLocation search_context_size
    search_content_types
WebSearchTool: type external_web_access filters=WebSearchTool.filters.0
    user_location=WebSearchApproximateLocation search_context_size
WebSearchTool.filters.0: allowed_domains
WebSearchToolCall: id type status
    action=WebSearchActionSearch|WebSearchActionOpenPage|WebSearchActionFind
"""
